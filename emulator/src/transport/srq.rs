//! A shared receive queue: receive WQEs that several QPs' responders take from, plus the
//! limit event of `ibv_modify_srq`.
//!
//! The engine keeps each SRQ behind a lock and lends it to a QP's transport calls through
//! [`crate::transport::Env::srq`]; nothing here knows about threads.

use softverbs_api::{
    backend::PostError, AsyncElement, AsyncEvent, AsyncEventKind, RecvWr, SrqAttr, SrqAttrMask,
    VerbsError, VerbsResult,
};

use super::wqe::{RecvWqe, WorkQueue};

/// One SRQ's WQEs and attributes.
#[derive(Debug)]
pub struct SharedRecvQueue {
    /// The SRQ id (what async events name).
    pub id: u32,
    /// Protection domain of the SRQ: its WQEs' lkeys are checked against it.
    pub pd: u32,
    queue: WorkQueue<RecvWqe>,
    max_wr: u32,
    max_sge: u32,
    /// Armed limit (0 = disarmed).
    limit: u32,
}

impl SharedRecvQueue {
    /// An empty SRQ with the granted `attr` (its `srq_limit` arms the limit right away, as
    /// `ibv_create_srq` does).
    pub fn new(id: u32, pd: u32, attr: &SrqAttr) -> SharedRecvQueue {
        SharedRecvQueue {
            id,
            pd,
            queue: WorkQueue::new(attr.max_wr as usize),
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: attr.srq_limit,
        }
    }

    /// The current attributes (`srq_limit` is 0 once the limit event fired).
    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit,
        }
    }

    /// WQEs posted and not yet taken.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True if no WQE is posted.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// `ibv_post_srq_recv`: checks and queues each WR; on failure, the index of the first
    /// WR not posted.
    pub fn post(&mut self, wrs: &[RecvWr]) -> Result<(), PostError> {
        for (index, wr) in wrs.iter().enumerate() {
            let checked = if wr.sg_list.len() > self.max_sge as usize {
                Err(VerbsError::inval(format!(
                    "{} SGEs exceed the SRQ's max_sge {}",
                    wr.sg_list.len(),
                    self.max_sge
                )))
            } else {
                self.queue
                    .push(RecvWqe::from_wr(wr))
                    .map_err(|_| VerbsError::nomem(format!("SRQ full ({} WRs)", self.max_wr)))
            };
            checked.map_err(|error| PostError { index, error })?;
        }
        Ok(())
    }

    /// `ibv_modify_srq`: resize (MAX_WR, never below what is posted) and/or arm the limit
    /// (LIMIT, at most `max_wr`).
    pub fn modify(
        &mut self,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        max_wr_cap: u32,
    ) -> VerbsResult<()> {
        let known = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
        if mask.0 & !known.0 != 0 {
            return Err(VerbsError::inval(format!(
                "unknown SRQ attribute mask {:#x}",
                mask.0
            )));
        }
        let mut max_wr = self.max_wr;
        if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 || attr.max_wr > max_wr_cap {
                return Err(VerbsError::inval(format!(
                    "SRQ max_wr {} not in 1..={max_wr_cap}",
                    attr.max_wr
                )));
            }
            if (attr.max_wr as usize) < self.queue.len() {
                return Err(VerbsError::inval(format!(
                    "SRQ max_wr {} is below the {} WRs posted",
                    attr.max_wr,
                    self.queue.len()
                )));
            }
            max_wr = attr.max_wr;
        }
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > max_wr {
            return Err(VerbsError::inval(format!(
                "SRQ limit {} above max_wr {max_wr}",
                attr.srq_limit
            )));
        }
        if max_wr != self.max_wr {
            self.queue.set_capacity(max_wr as usize);
            self.max_wr = max_wr;
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            self.limit = attr.srq_limit;
        }
        Ok(())
    }

    /// Takes the oldest WQE for a responder. When that leaves fewer WQEs than the armed
    /// limit, the limit disarms and an SRQ_LIMIT_REACHED event is pushed to `events`.
    pub fn take(&mut self, events: &mut Vec<AsyncEvent>) -> Option<RecvWqe> {
        let wqe = self.queue.pop()?;
        if self.limit != 0 && (self.queue.len() as u32) < self.limit {
            self.limit = 0;
            events.push(AsyncEvent {
                kind: AsyncEventKind::SrqLimitReached,
                element: AsyncElement::Srq(self.id),
            });
        }
        Some(wqe)
    }

    /// Puts back a WQE a responder took but did not complete (an unreliable message that
    /// was dropped half-way): it is used again, never lost. From the application's view the
    /// SRQ is an unordered set, so where it goes does not matter; it goes first.
    pub fn give_back(&mut self, wqe: RecvWqe) {
        self.queue.push_front_over_capacity(wqe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_api::Sge;

    fn wr(id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            sg_list: vec![Sge {
                addr: 0,
                length: 64,
                lkey: 1,
            }],
        }
    }

    fn srq(max_wr: u32, limit: u32) -> SharedRecvQueue {
        SharedRecvQueue::new(
            7,
            1,
            &SrqAttr {
                max_wr,
                max_sge: 1,
                srq_limit: limit,
            },
        )
    }

    #[test]
    fn limit_fires_once_below_the_mark_then_disarms() {
        let mut q = srq(8, 0);
        q.post(&(0..4).map(wr).collect::<Vec<_>>()).unwrap();
        q.modify(
            &SrqAttr {
                srq_limit: 3,
                ..SrqAttr::default()
            },
            SrqAttrMask::LIMIT,
            8,
        )
        .unwrap();
        let mut events = Vec::new();
        assert_eq!(q.take(&mut events).map(|w| w.wr_id), Some(0));
        assert!(events.is_empty(), "3 left is not below the limit 3");
        assert_eq!(q.take(&mut events).map(|w| w.wr_id), Some(1));
        assert_eq!(
            events,
            vec![AsyncEvent {
                kind: AsyncEventKind::SrqLimitReached,
                element: AsyncElement::Srq(7)
            }]
        );
        assert_eq!(q.attr().srq_limit, 0, "the limit disarms");
        q.take(&mut events);
        assert_eq!(events.len(), 1, "fires once");
    }

    #[test]
    fn post_checks_sges_and_capacity_with_the_failing_index() {
        let mut q = srq(2, 0);
        let mut too_many = wr(9);
        too_many.sg_list.push(Sge::default());
        let e = q.post(&[wr(0), too_many]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (1, 22));
        let e = q.post(&[wr(1), wr(2)]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (1, 12));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn modify_checks_limit_and_resize() {
        let mut q = srq(4, 0);
        q.post(&(0..3).map(wr).collect::<Vec<_>>()).unwrap();
        let limit = |l| SrqAttr {
            srq_limit: l,
            ..SrqAttr::default()
        };
        assert_eq!(
            q.modify(&limit(5), SrqAttrMask::LIMIT, 16)
                .unwrap_err()
                .errno(),
            22
        );
        let shrink = SrqAttr {
            max_wr: 2,
            ..SrqAttr::default()
        };
        assert_eq!(
            q.modify(&shrink, SrqAttrMask::MAX_WR, 16)
                .unwrap_err()
                .errno(),
            22
        );
        let grow = SrqAttr {
            max_wr: 16,
            ..SrqAttr::default()
        };
        q.modify(&grow, SrqAttrMask::MAX_WR, 16).unwrap();
        assert_eq!(q.attr().max_wr, 16);
        q.post(&(3..16).map(wr).collect::<Vec<_>>()).unwrap();
        assert_eq!(q.len(), 16);
    }

    #[test]
    fn a_given_back_wqe_is_taken_again() {
        let mut q = srq(2, 0);
        q.post(&[wr(0), wr(1)]).unwrap();
        let mut events = Vec::new();
        let w = q.take(&mut events).unwrap();
        q.post(&[wr(2)]).unwrap();
        q.give_back(w);
        let ids: Vec<u64> = std::iter::from_fn(|| q.take(&mut events).map(|w| w.wr_id)).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2], "nothing lost, nothing twice");
    }
}
