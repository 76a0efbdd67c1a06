//! Tests of `cq_hand_off` with real CQs.

use super::cq::CompletionQueue;
use super::cq_hand_off::receive_into;
use softverbs_api::{WcOpcode, WcStatus, WorkCompletion};

fn wc(wr_id: u64) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 8,
        ..WorkCompletion::default()
    }
}

fn ids(wcs: &[WorkCompletion]) -> Vec<u64> {
    wcs.iter().map(|w| w.wr_id).collect()
}

#[test]
fn completions_of_the_polled_cq_go_to_the_poll_in_order_until_its_output_is_full() {
    let (cq, other) = (CompletionQueue::new(16), CompletionQueue::new(16));
    let mut out = [WorkCompletion::default(); 2];
    let (received, handed) = receive_into(&cq, &mut out, |h| {
        h.arm();
        for id in 1..=3 {
            cq.push(wc(id), false);
        }
        other.push(wc(9), false);
        7
    });
    assert_eq!((received, handed), (7, 2));
    assert_eq!(ids(&out), [1, 2]);
    // The third found the output full: queued, and polled after them.
    let mut rest = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut rest).unwrap(), 1);
    assert_eq!(rest[0].wr_id, 3);
    assert_eq!(other.poll(&mut rest).unwrap(), 1, "another CQ's is queued");
    assert_eq!(rest[0].wr_id, 9);
}

#[test]
fn a_receive_that_has_not_armed_the_hand_off_queues() {
    let cq = CompletionQueue::new(16);
    let mut out = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&cq, &mut out, |_| {
        cq.push(wc(1), false);
        0
    });
    assert_eq!((handed, cq.len()), (0, 1));
}

#[test]
fn nothing_overtakes_a_completion_already_queued() {
    let cq = CompletionQueue::new(16);
    cq.push(wc(1), false);
    let mut out = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&cq, &mut out, |h| {
        h.arm();
        cq.push(wc(2), false);
        1
    });
    assert_eq!(handed, 0);
    assert_eq!(cq.poll(&mut out).unwrap(), 2);
    assert_eq!(ids(&out[..2]), [1, 2]);
}

#[test]
fn a_completion_handed_over_raises_the_event_its_arming_asks_for() {
    use super::comp_channel::CompChannel;
    use std::sync::Arc;
    use std::time::Duration;
    let channel = Arc::new(CompChannel::new().unwrap());
    channel.attach(7);
    let cq = CompletionQueue::for_context(16, 7, 1, Some(channel.clone()));
    cq.req_notify(false);
    let mut out = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&cq, &mut out, |h| {
        h.arm();
        cq.push(wc(1), false);
        cq.push(wc(2), false);
        1
    });
    assert_eq!(handed, 2);
    assert_eq!(channel.get(Some(Duration::ZERO)), Some(7));
    assert_eq!(
        channel.get(Some(Duration::ZERO)),
        None,
        "one event per arming"
    );
    assert!(cq.is_empty());
}

#[test]
fn a_poll_inside_another_keeps_its_own_and_a_receive_that_unwinds_queues_them() {
    let (outer_cq, inner_cq) = (CompletionQueue::new(16), CompletionQueue::new(16));
    let mut outer = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&outer_cq, &mut outer, |h| {
        h.arm();
        outer_cq.push(wc(1), false);
        let mut inner = [WorkCompletion::default(); 4];
        let (_, inner_handed) = receive_into(&inner_cq, &mut inner, |h| {
            h.arm();
            inner_cq.push(wc(2), false);
            outer_cq.push(wc(3), false);
            1
        });
        assert_eq!((inner_handed, inner[0].wr_id), (1, 2));
        outer_cq.push(wc(4), false);
        1
    });
    // 3 came while the inner poll was armed: queued, and 4 followed it there.
    assert_eq!((handed, outer[0].wr_id), (1, 1));
    assert_eq!(outer_cq.poll(&mut outer).unwrap(), 2);
    assert_eq!(ids(&outer[..2]), [3, 4]);

    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        receive_into(&outer_cq, &mut outer, |h| {
            h.arm();
            outer_cq.push(wc(5), false);
            panic!("a receive that fails half-way");
        })
    }));
    assert!(unwound.is_err());
    outer_cq.push(wc(6), false);
    assert_eq!(outer_cq.poll(&mut outer).unwrap(), 2);
    assert_eq!(ids(&outer[..2]), [5, 6]);
}

#[test]
fn only_the_receiving_thread_hands_over_and_only_while_it_receives() {
    let cq = std::sync::Arc::new(CompletionQueue::new(16));
    let mut out = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&*cq, &mut out, |h| {
        h.arm();
        let pusher = cq.clone();
        std::thread::spawn(move || pusher.push(wc(5), false))
            .join()
            .unwrap();
        1
    });
    assert_eq!(handed, 0, "another thread's push is queued");
    cq.push(wc(6), false);
    assert_eq!(cq.poll(&mut out).unwrap(), 2);
    assert_eq!(ids(&out[..2]), [5, 6]);
}

#[test]
fn a_poll_of_the_same_cq_inside_a_receive_that_unwinds_gets_back_what_it_took() {
    let cq = CompletionQueue::new(16);
    let mut outer = [WorkCompletion::default(); 4];
    let (_, handed) = receive_into(&cq, &mut outer, |h| {
        h.arm();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut inner = [WorkCompletion::default(); 4];
            receive_into(&cq, &mut inner, |h| {
                h.arm();
                cq.push(wc(1), false);
                panic!("a receive that fails half-way");
            })
        }));
        assert!(unwound.is_err());
        1
    });
    // The inner poll's completion, requeued as it unwound, went to the poll armed then.
    assert_eq!((handed, outer[0].wr_id), (1, 1));
    assert!(cq.is_empty());
}
