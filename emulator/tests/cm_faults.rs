//! The CM under a seeded wire that loses, duplicates and reorders MADs: every connection
//! attempt ends in exactly one ESTABLISHED or one error event on each side, disconnects
//! end in one DISCONNECTED and one TIMEWAIT_EXIT each, nothing leaks, and a seed replays
//! the same trace. A failing seed is printed.

mod cm_harness;

use cm_harness::{connect_params, is_terminal, Faults, World};
use softverbs_emu::cm::{CmEventKind, CmId, QpRequest};
use softverbs_emu::wire::cm::PortSpace;

const PORT: u16 = 4791;

/// Node 1 listens and accepts with `passive_qpn`; node 0 connects from QP 0x100; runs
/// until quiet.
fn connect_and_settle(seed: u64, faults: Faults, passive_qpn: u32) -> (World, CmId) {
    let mut w = World::new(seed, faults);
    w.nodes[1].cm.listen(PortSpace::Tcp, PORT).unwrap();
    w.nodes[1].auto_accept_qpn = Some(passive_qpn);
    let (peer, now) = (w.addr(1), w.now_ns);
    let a = w.nodes[0]
        .cm
        .connect(now, &connect_params(peer, PORT, 0x100))
        .unwrap();
    w.settle();
    (w, a)
}

/// One connect + disconnect on `seed`; returns the trace of MADs sent and events, and how
/// many MADs were resent or answered as duplicates.
fn run(seed: u64, faults: Faults) -> (String, u64) {
    let (mut w, a) = connect_and_settle(seed, faults, 0x200 + seed as u32 % 1000);
    let requests: Vec<CmId> = w.nodes[1]
        .log
        .events
        .iter()
        .filter(|(_, e)| matches!(e.kind, CmEventKind::ConnectRequest { .. }))
        .map(|(_, e)| e.id)
        .collect();
    assert_eq!(requests.len(), 1, "seed {seed}: one CONNECT_REQUEST");
    let p = requests[0];
    let outcome = |w: &World, i: usize, id: CmId| -> Vec<CmEventKind> {
        w.nodes[i]
            .log
            .kinds(id)
            .into_iter()
            .filter(|k| is_terminal(k))
            .cloned()
            .collect()
    };
    let (ao, po) = (outcome(&w, 0, a), outcome(&w, 1, p));
    assert_eq!(ao.len(), 1, "seed {seed}: active outcome {ao:?}");
    assert_eq!(po.len(), 1, "seed {seed}: passive outcome {po:?}");
    let both = matches!(ao[0], CmEventKind::Established { .. })
        && matches!(po[0], CmEventKind::Established { .. });
    if faults.loss <= 0.3 {
        assert!(both, "seed {seed}: {ao:?} / {po:?}");
    }
    if both {
        // The QPs were set up crosswise whatever got lost or duplicated.
        let rts = |i: usize| {
            w.nodes[i].log.qp.iter().find_map(|q| match q {
                QpRequest::Rts { attrs, .. } => Some(*attrs),
                _ => None,
            })
        };
        let rtr = |i: usize| {
            w.nodes[i].log.qp.iter().find_map(|q| match q {
                QpRequest::Rtr { attrs, .. } => Some(*attrs),
                _ => None,
            })
        };
        assert_eq!(
            rts(0).unwrap().sq_psn,
            rtr(1).unwrap().rq_psn,
            "seed {seed}"
        );
        assert_eq!(
            rts(1).unwrap().sq_psn,
            rtr(0).unwrap().rq_psn,
            "seed {seed}"
        );
        let side = (seed % 2) as usize;
        let now = w.now_ns;
        w.nodes[side].cm.disconnect(now, [a, p][side]).unwrap();
        w.settle();
        for (i, id) in [(0, a), (1, p)] {
            let kinds = w.nodes[i].log.kinds(id);
            let n = |k: &CmEventKind| kinds.iter().filter(|x| **x == k).count();
            assert_eq!(
                n(&CmEventKind::Disconnected),
                1,
                "seed {seed} node {i}: {kinds:?}"
            );
            assert_eq!(
                n(&CmEventKind::TimewaitExit),
                1,
                "seed {seed} node {i}: {kinds:?}"
            );
        }
    } else {
        // Whatever is left is released by destroying the handles.
        let now = w.now_ns;
        let _ = w.nodes[0].cm.destroy(now, a);
        let _ = w.nodes[1].cm.destroy(now, p);
        w.settle();
    }
    for (i, n) in w.nodes.iter().enumerate() {
        let c = n.cm.counters();
        assert_eq!(n.cm.live_connections(), 0, "seed {seed} node {i} leaked");
        assert_eq!(
            c.connections_created, c.connections_freed,
            "seed {seed} node {i}"
        );
        assert_eq!(n.cm.next_deadline_ns(), None);
    }
    let c = [w.nodes[0].cm.counters(), w.nodes[1].cm.counters()];
    let recovered = c
        .iter()
        .map(|c| c.retransmits + c.duplicate_reqs + c.duplicate_reps + c.duplicate_dreqs)
        .sum();
    (
        format!("{:?}{:?}", w.nodes[0].log, w.nodes[1].log),
        recovered,
    )
}

const LOSSY: Faults = Faults {
    loss: 0.2,
    dup: 0.2,
    jitter_ns: 300_000,
    corrupt: 0.0,
};

#[test]
fn lossy_duplicating_reordering_wire_connects_and_disconnects_exactly_once() {
    let mut retransmitting_seeds = 0;
    for seed in 0..300 {
        if run(seed, LOSSY).1 > 0 {
            retransmitting_seeds += 1;
        }
    }
    assert!(
        retransmitting_seeds > 20,
        "the faults must bite: {retransmitting_seeds}"
    );
}

#[test]
fn heavy_loss_still_gives_one_outcome_per_side_and_no_leaks() {
    for seed in 1000..1100 {
        run(
            seed,
            Faults {
                loss: 0.7,
                dup: 0.3,
                jitter_ns: 1_000_000,
                corrupt: 0.0,
            },
        );
    }
}

#[test]
fn the_same_seed_replays_the_same_trace() {
    assert_eq!(run(42, LOSSY), run(42, LOSSY));
    assert_ne!(run(42, LOSSY), run(43, LOSSY));
}

/// Flipped bits reach the CM as hostile input: it never panics, counts what does not parse,
/// never reports more than one outcome per handle, and releases everything once the
/// application destroys its handles.
#[test]
fn corrupted_mads_never_panic_or_leak() {
    let faults = Faults {
        loss: 0.1,
        dup: 0.1,
        jitter_ns: 300_000,
        corrupt: 0.3,
    };
    let mut malformed = 0;
    for seed in 2000..2200 {
        let (mut w, a) = connect_and_settle(seed, faults, 0x300);
        let now = w.now_ns;
        let _ = w.nodes[0].cm.disconnect(now, a);
        w.settle();
        let mut handles: Vec<(usize, CmId)> = vec![(0, a)];
        handles.extend(w.nodes[1].log.events.iter().map(|(_, e)| (1, e.id)));
        for &(i, id) in &handles {
            let kinds = w.nodes[i].log.kinds(id);
            let outcomes = kinds.iter().filter(|k| is_terminal(k)).count();
            assert!(outcomes <= 1, "seed {seed} node {i}: {kinds:?}");
            let now = w.now_ns;
            let _ = w.nodes[i].cm.destroy(now, id);
        }
        w.settle();
        for (i, n) in w.nodes.iter().enumerate() {
            assert_eq!(n.cm.live_connections(), 0, "seed {seed} node {i} leaked");
            assert_eq!(n.cm.next_deadline_ns(), None, "seed {seed} node {i}");
            malformed += n.cm.counters().malformed;
        }
    }
    assert!(malformed > 0, "corruption must reach the parser");
}
