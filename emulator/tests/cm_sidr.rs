//! UD service resolution (SIDR) through the sans-I/O CM: resolved, refused, unlistened,
//! unanswered (after the kernel's retries), and exactly one outcome under faults.

mod cm_harness;

use cm_harness::{Faults, World};
use softverbs_emu::cm::{timing, CmError, CmEventKind};
use softverbs_emu::wire::cm::{sidr_status, CmMessage, PortSpace};

const PORT: u16 = 5000;
const QKEY: u32 = 0x1111_2222;

/// Node 0 resolves node 1's UDP port; node 1 accepts (or rejects) every request.
fn resolve(seed: u64, faults: Faults, listen: bool, accept: bool) -> (World, Vec<CmEventKind>) {
    let mut w = World::new(seed, faults);
    if listen {
        w.nodes[1].cm.listen(PortSpace::Udp, PORT).unwrap();
    }
    w.nodes[1].auto_sidr = Some(accept.then_some((0x77, QKEY)));
    let (peer, now) = (w.addr(1), w.now_ns);
    let id = w.nodes[0]
        .cm
        .sidr_resolve(now, peer, 6000, PORT, b"ud?")
        .unwrap();
    w.settle();
    let kinds = w.nodes[0].log.kinds(id).into_iter().cloned().collect();
    (w, kinds)
}

#[test]
fn sidr_resolves_qpn_and_qkey() {
    let (w, kinds) = resolve(1, Faults::default(), true, true);
    match &kinds[..] {
        [CmEventKind::SidrResolved {
            qpn: 0x77,
            qkey: QKEY,
            private_data,
        }] => assert_eq!(&private_data[..4], b"here"),
        other => panic!("{other:?}"),
    }
    match &w.nodes[1].log.events[0].1.kind {
        CmEventKind::SidrRequest {
            cma, private_data, ..
        } => {
            assert_eq!(cma.src_port, 6000);
            assert_eq!(&private_data[..3], b"ud?");
            assert_eq!(private_data.len(), 180);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.nodes[0].cm.live_sidr(), 0);
}

#[test]
fn sidr_refused_and_unlistened_report_the_status() {
    let (_, kinds) = resolve(2, Faults::default(), true, false);
    assert_eq!(
        kinds,
        [CmEventKind::SidrFailed {
            status: Some(sidr_status::REJECT)
        }]
    );
    let (w, kinds) = resolve(3, Faults::default(), false, true);
    assert_eq!(
        kinds,
        [CmEventKind::SidrFailed {
            status: Some(sidr_status::UNSUPPORTED)
        }]
    );
    assert!(w.nodes[1].log.events.is_empty());
    assert_eq!(w.nodes[1].cm.live_sidr(), 0);
}

#[test]
fn an_unanswered_sidr_fails_after_the_retries() {
    let mut w = World::new(4, Faults::default());
    w.nodes[1].mute = true;
    let (peer, t0) = (w.addr(1), w.now_ns);
    let id = w.nodes[0].cm.sidr_resolve(t0, peer, 1, PORT, &[]).unwrap();
    w.settle();
    let sent: Vec<u64> = w.nodes[0].log.sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(sent.len(), 16);
    assert!(sent
        .iter()
        .enumerate()
        .all(|(k, t)| *t == t0 + k as u64 * timing::iba_time_ns(20)));
    assert_eq!(
        w.nodes[0].log.kinds(id),
        [&CmEventKind::SidrFailed { status: None }]
    );
    assert!(matches!(
        w.nodes[0].log.sent[0].1.message,
        CmMessage::SidrReq(_)
    ));
    assert_eq!(w.nodes[0].cm.live_sidr() + w.nodes[1].cm.live_sidr(), 0);
}

#[test]
fn sidr_under_faults_gives_one_outcome_and_one_request_event() {
    let faults = Faults {
        loss: 0.2,
        dup: 0.2,
        jitter_ns: 300_000,
        corrupt: 0.0,
    };
    for seed in 0..200 {
        let (mut w, kinds) = resolve(seed, faults, true, true);
        assert_eq!(kinds.len(), 1, "seed {seed}: {kinds:?}");
        assert!(
            matches!(kinds[0], CmEventKind::SidrResolved { qpn: 0x77, .. }),
            "seed {seed}"
        );
        let requests = w.nodes[1]
            .log
            .events
            .iter()
            .filter(|(_, e)| matches!(e.kind, CmEventKind::SidrRequest { .. }))
            .count();
        assert_eq!(
            requests, 1,
            "seed {seed}: duplicates must not make a second request"
        );
        w.settle();
        assert_eq!(
            w.nodes[0].cm.live_sidr() + w.nodes[1].cm.live_sidr(),
            0,
            "seed {seed}"
        );
    }
}

#[test]
fn sidr_argument_errors() {
    let mut w = World::new(5, Faults::default());
    let peer = w.addr(1);
    assert_eq!(
        w.nodes[0].cm.sidr_resolve(0, peer, 1, 2, &[0; 181]),
        Err(CmError::PrivateDataTooLong { got: 181, max: 180 })
    );
    let v6 = "::1".parse().unwrap();
    assert!(matches!(
        w.nodes[0].cm.sidr_resolve(0, v6, 1, 2, &[]),
        Err(CmError::BadArgument(_))
    ));
}
