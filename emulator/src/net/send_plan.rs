//! How datagrams are grouped into send calls: which ones leave together as one GSO send,
//! and how many entries one sendmmsg takes. Plans only; `batched_io` makes the calls.

use super::batched_io::{Datagram, GSO_MAX_BYTES, MAX_BATCH, MAX_SEND_DATAGRAMS};

/// How many datagrams from the start of `datagrams` can leave as one GSO send (one entry of
/// [`send_runs`](super::batched_io::send_runs)): same destination and steering slot, all the
/// size of the first except the last (no larger), at most [`MAX_BATCH`] and
/// [`GSO_MAX_BYTES`] in all. 1 means send it alone; 0 for none. A RoCE message's first
/// packet (RETH) so takes one shorter packet as its tail, and the rest of the message makes
/// the next run.
///
/// The slot: the kernel steers a GSO send by its first datagram, on a port that processes
/// share. A datagram for another process in the run would reach it by the owner's
/// forwarding, after what was sent later straight to it: an ACK overtaken by the answer
/// sent behind it (a shared CQ saw the answer's receive complete before the SEND the ACK
/// was for).
pub fn gso_run<D: Datagram>(datagrams: &[D]) -> usize {
    let Some(head) = datagrams.first() else {
        return 0;
    };
    let seg = head.bytes().len();
    let (dst, slot) = (head.destination(), head.steering_slot());
    let mut n = 1;
    let mut total = seg;
    while n < datagrams.len() && n < MAX_BATCH {
        let d = &datagrams[n];
        let len = d.bytes().len();
        let apart = d.destination() != dst || d.steering_slot() != slot;
        if apart || len > seg || total + len > GSO_MAX_BYTES {
            break;
        }
        n += 1;
        total += len;
        if len < seg {
            break; // a shorter one can only end the run
        }
    }
    n
}

/// Whether one more entry, a run of `run` datagrams, fits a
/// [`send_runs`](super::batched_io::send_runs) call that holds `entries` entries of
/// `datagrams` datagrams so far.
pub fn call_has_room(entries: usize, datagrams: usize, run: usize) -> bool {
    entries < MAX_BATCH && datagrams + run <= MAX_SEND_DATAGRAMS
}

/// Groups `list` into [`send_runs`](super::batched_io::send_runs) calls: `run_of` says how
/// many datagrams from the start of a slice leave as one entry (a GSO run such as
/// [`gso_run`] finds, or 1), and a call takes entries while [`call_has_room`]. `call(first,
/// runs)` gets each call in order, with the index of its first datagram in `list`.
pub fn group_calls<D>(
    list: &[D],
    run_of: impl Fn(&[D]) -> usize,
    mut call: impl FnMut(usize, &[usize]),
) {
    let mut runs = [0usize; MAX_BATCH];
    let (mut start, mut n_runs, mut i) = (0, 0, 0);
    while i < list.len() {
        let run = run_of(&list[i..]).max(1);
        if !call_has_room(n_runs, i - start, run) {
            call(start, &runs[..n_runs]);
            (start, n_runs) = (i, 0);
        }
        runs[n_runs] = run;
        n_runs += 1;
        i += run;
    }
    if n_runs > 0 {
        call(start, &runs[..n_runs]);
    }
}
