//! Bit-flag sets of verbs.h: memory access flags, send flags and work-completion flags.

macro_rules! flag_set {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $flag:ident = $val:expr,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$fdoc])* pub const $flag: $name = $name($val);)*
            /// The empty set.
            pub const fn empty() -> Self { $name(0) }
            /// The raw bits, with the same values as verbs.h.
            pub const fn bits(self) -> u32 { self.0 }
            /// True if every flag of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// True if any flag of `other` is set in `self`.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }
            /// All flags this type knows.
            pub const fn all() -> Self { $name(0 $(| $val)*) }
            /// True if no bit outside [`Self::all`] is set.
            pub const fn is_known(self) -> bool { self.0 & !Self::all().0 == 0 }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name { $name(self.0 | rhs.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) { self.0 |= rhs.0 }
        }
        impl core::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name { $name(self.0 & rhs.0) }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $(if self.contains($name::$flag) && $val != 0 {
                    if !first { write!(f, " | ")?; }
                    first = false;
                    write!(f, stringify!($flag))?;
                })*
                let unknown = self.0 & !Self::all().0;
                if unknown != 0 {
                    if !first { write!(f, " | ")?; }
                    write!(f, "{:#x}", unknown)?;
                }
                write!(f, ")")
            }
        }
    };
}

flag_set! {
    /// `enum ibv_access_flags`: what a memory region (or window) allows.
    AccessFlags {
        /// IBV_ACCESS_LOCAL_WRITE: the local HCA may write (receives, read responses).
        LOCAL_WRITE = 1,
        /// IBV_ACCESS_REMOTE_WRITE (requires LOCAL_WRITE).
        REMOTE_WRITE = 1 << 1,
        /// IBV_ACCESS_REMOTE_READ.
        REMOTE_READ = 1 << 2,
        /// IBV_ACCESS_REMOTE_ATOMIC (requires LOCAL_WRITE).
        REMOTE_ATOMIC = 1 << 3,
        /// IBV_ACCESS_MW_BIND.
        MW_BIND = 1 << 4,
        /// IBV_ACCESS_ZERO_BASED.
        ZERO_BASED = 1 << 5,
        /// IBV_ACCESS_ON_DEMAND.
        ON_DEMAND = 1 << 6,
        /// IBV_ACCESS_HUGETLB.
        HUGETLB = 1 << 7,
        /// IBV_ACCESS_FLUSH_GLOBAL.
        FLUSH_GLOBAL = 1 << 8,
        /// IBV_ACCESS_FLUSH_PERSISTENT.
        FLUSH_PERSISTENT = 1 << 9,
        /// IBV_ACCESS_RELAXED_ORDERING.
        RELAXED_ORDERING = 1 << 20,
    }
}

flag_set! {
    /// `enum ibv_send_flags`.
    SendFlags {
        /// IBV_SEND_FENCE: wait for earlier READ/atomic WRs before starting.
        FENCE = 1,
        /// IBV_SEND_SIGNALED: generate a completion (when the QP is not `sq_sig_all`).
        SIGNALED = 1 << 1,
        /// IBV_SEND_SOLICITED: set the solicited-event bit.
        SOLICITED = 1 << 2,
        /// IBV_SEND_INLINE: copy the data at post time, so the buffer is reusable on return.
        /// ibv_post_send(3) does not check the lkey; the emulator does (it reads process
        /// memory only through registered regions), rejecting a bad one with EINVAL.
        INLINE = 1 << 3,
        /// IBV_SEND_IP_CSUM (not supported by the emulator).
        IP_CSUM = 1 << 4,
    }
}

flag_set! {
    /// `enum ibv_wc_flags`.
    WcFlags {
        /// IBV_WC_GRH: the first 40 bytes of the receive buffer hold a GRH (UD).
        GRH = 1,
        /// IBV_WC_WITH_IMM: `imm_data` is valid.
        WITH_IMM = 1 << 1,
        /// IBV_WC_IP_CSUM_OK.
        IP_CSUM_OK = 1 << 2,
        /// IBV_WC_WITH_INV: `invalidated_rkey` is valid.
        WITH_INV = 1 << 3,
    }
}
