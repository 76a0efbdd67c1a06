//! Bit-field access at IBA (byte, bit, width) locations, as the CM tables give them, and the
//! one macro that turns such a table into a zero-copy view plus its Repr.
//!
//! Bit offsets count from the most significant bit of the byte (IBA and the kernel's
//! `IBA_FIELD_BLOC` convention). Views check their whole length once in `new_checked`, so
//! no accessor can index out of range afterwards.

/// Reads `width` bits (1..=64) starting `bit` bits below the top of byte `byte`.
pub(crate) fn get_bits(b: &[u8], byte: usize, bit: usize, width: usize) -> u64 {
    let nbytes = (bit + width).div_ceil(8);
    let mut v: u128 = 0;
    for &x in &b[byte..byte + nbytes] {
        v = (v << 8) | u128::from(x);
    }
    let shift = nbytes * 8 - bit - width;
    let mask: u128 = (1u128 << width) - 1;
    ((v >> shift) & mask) as u64
}

/// Writes the low `width` bits of `value` at (`byte`, `bit`), keeping the other bits.
pub(crate) fn set_bits(b: &mut [u8], byte: usize, bit: usize, width: usize, value: u64) {
    let nbytes = (bit + width).div_ceil(8);
    let shift = nbytes * 8 - bit - width;
    let mask: u128 = ((1u128 << width) - 1) << shift;
    let mut v: u128 = 0;
    for &x in &b[byte..byte + nbytes] {
        v = (v << 8) | u128::from(x);
    }
    v = (v & !mask) | ((u128::from(value) << shift) & mask);
    for i in (0..nbytes).rev() {
        b[byte + i] = v as u8;
        v >>= 8;
    }
}

/// `Ok` if `buf` holds at least `needed` bytes.
pub(crate) fn check_len(buf: &[u8], needed: usize) -> Result<(), super::MadError> {
    if buf.len() < needed {
        Err(super::MadError::Truncated {
            needed,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Declares a view `$view<T: AsRef<[u8]>>` of `$len` bytes with one getter and setter per
/// scalar field (byte, bit, width) and per byte-array field (offset, length), and a
/// `$repr` struct holding every field with `parse` and `emit`. Bits not named are reserved:
/// `emit` writes them as zero.
macro_rules! mad_layout {
    (
        $(#[$vdoc:meta])* view $view:ident;
        $(#[$rdoc:meta])* repr $repr:ident;
        len $len:expr;
        fields {
            $( $(#[$fdoc:meta])* $get:ident, $set:ident : $ty:ty = ($byte:expr, $bit:expr, $width:expr); )*
        }
        bytes {
            $( $(#[$bdoc:meta])* $bget:ident, $bset:ident = ($boff:expr, $blen:expr); )*
        }
    ) => {
        $(#[$vdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Bytes this view covers.
            pub const LEN: usize = $len;

            /// Wraps `buffer` after checking it holds the whole structure.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::cm::MadError> {
                $crate::wire::cm::layout::check_len(buffer.as_ref(), $len)?;
                Ok(Self { buffer })
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                $(#[$fdoc])*
                pub fn $get(&self) -> $ty {
                    $crate::wire::cm::layout::get_bits(self.buffer.as_ref(), $byte, $bit, $width) as $ty
                }
            )*

            $(
                $(#[$bdoc])*
                pub fn $bget(&self) -> &[u8] {
                    &self.buffer.as_ref()[$boff..$boff + $blen]
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// Zeroes the whole structure (reserved bits included).
            pub fn clear(&mut self) {
                self.buffer.as_mut()[..$len].fill(0);
            }

            $(
                #[doc = concat!("Sets `", stringify!($get), "` (the low bits of `v` that fit).")]
                pub fn $set(&mut self, v: $ty) {
                    $crate::wire::cm::layout::set_bits(self.buffer.as_mut(), $byte, $bit, $width, v as u64);
                }
            )*

            $(
                #[doc = concat!("The bytes of `", stringify!($bget), "`, writable.")]
                pub fn $bset(&mut self) -> &mut [u8] {
                    &mut self.buffer.as_mut()[$boff..$boff + $blen]
                }
            )*
        }

        $(#[$rdoc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $repr {
            $( $(#[$fdoc])* pub $get: $ty, )*
            $( $(#[$bdoc])* pub $bget: [u8; $blen], )*
        }

        impl Default for $repr {
            fn default() -> Self {
                Self {
                    $( $get: 0, )*
                    $( $bget: [0; $blen], )*
                }
            }
        }

        impl $repr {
            /// Reads every field of a view.
            pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &$view<&T>) -> Self {
                Self {
                    $( $get: view.$get(), )*
                    $( $bget: {
                        let mut a = [0u8; $blen];
                        a.copy_from_slice(view.$bget());
                        a
                    }, )*
                }
            }

            /// Writes every field; reserved bits become zero. Values wider than their field
            /// are cut to the field's width.
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut $view<&mut T>) {
                view.clear();
                $( view.$set(self.$get); )*
                $( view.$bset().copy_from_slice(&self.$bget); )*
            }
        }
    };
}

pub(crate) use mad_layout;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_the_iba_msb_first_convention() {
        // REQ word at 88: flow label (20 bits) then reserved then packet rate (6 low bits).
        let b = [0xb6, 0x26, 0x40, 0x05];
        assert_eq!(get_bits(&b, 0, 0, 20), 0xb6264);
        assert_eq!(get_bits(&b, 3, 2, 6), 5);
        assert_eq!(get_bits(&[0xa7], 0, 0, 5), 0x14);
        assert_eq!(get_bits(&[0xa7], 0, 5, 3), 7);
        let mut out = [0u8; 4];
        set_bits(&mut out, 0, 0, 20, 0xb6264);
        set_bits(&mut out, 3, 2, 6, 5);
        assert_eq!(out, [0xb6, 0x26, 0x40, 0x05]);
    }

    #[test]
    fn set_keeps_neighbouring_bits_and_cuts_wide_values() {
        let mut b = [0xffu8; 2];
        set_bits(&mut b, 0, 4, 4, 0);
        assert_eq!(b, [0xf0, 0xff]);
        set_bits(&mut b, 0, 4, 8, 0x1ab);
        assert_eq!(b, [0xfa, 0xbf]);
        let mut w = [0u8; 8];
        set_bits(&mut w, 0, 0, 64, u64::MAX);
        assert_eq!(get_bits(&w, 0, 0, 64), u64::MAX);
    }
}
