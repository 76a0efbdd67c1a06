//! Where a QP's responder gets its receive WQEs: the QP's own receive queue, or the SRQ it
//! was created with (lent through [`Env::srq`]).

use super::env::Env;
use super::outputs::Outputs;
use super::qp::TransportQp;
use super::wqe::RecvWqe;

/// True if a receive WQE could be taken now.
pub fn available(qp: &TransportQp, env: &Env<'_>) -> bool {
    match qp.srq {
        Some(_) => env.srq.is_some_and(|srq| !srq.lock().is_empty()),
        None => !qp.rq.is_empty(),
    }
}

/// Takes the next receive WQE (an SRQ may raise its limit event into `out.events`).
pub fn take(qp: &mut TransportQp, env: &Env<'_>, out: &mut Outputs) -> Option<RecvWqe> {
    match qp.srq {
        Some(_) => env.srq?.lock().take(&mut out.events),
        None => qp.rq.pop(),
    }
}

/// Returns a WQE taken for a message that was then dropped (UC / UD): it is used for the
/// next message, as if it had never been taken.
pub fn give_back(qp: &mut TransportQp, env: &Env<'_>, wqe: RecvWqe) {
    match (qp.srq, env.srq) {
        (Some(_), Some(srq)) => srq.lock().give_back(wqe),
        // Without its SRQ at hand the WQE stays with the QP, which flushes it later.
        _ => qp.rq.push_front_over_capacity(wqe),
    }
}
