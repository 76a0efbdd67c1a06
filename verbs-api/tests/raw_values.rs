//! The verbs.h values of the contract enums round-trip, and match verbs.h where it names them.

use softverbs_api::{AsyncEventKind, QpState, QpType, WcStatus, WrOpcode};

#[test]
fn raw_values_round_trip_and_match_verbs_h() {
    for s in WcStatus::ALL {
        assert_eq!(WcStatus::from_raw(s.to_raw()), Some(s));
    }
    assert_eq!(WcStatus::from_raw(12), Some(WcStatus::RetryExcErr)); // IBV_WC_RETRY_EXC_ERR
    assert_eq!(WcStatus::from_raw(21), Some(WcStatus::GeneralErr));
    assert_eq!(WcStatus::from_raw(22), None);
    for s in QpState::ALL {
        assert_eq!(QpState::from_raw(s.to_raw()), Some(s));
    }
    assert_eq!(QpState::from_raw(3), Some(QpState::Rts));
    assert_eq!(QpState::from_raw(7), None);
    assert_eq!(QpType::from_raw(4), Some(QpType::Ud));
    assert_eq!(QpType::from_raw(9), None); // IBV_QPT_XRC_SEND
    for raw in 0..32 {
        if let Some(op) = WrOpcode::from_raw(raw) {
            assert_eq!(op.to_raw(), raw);
        }
    }
    assert_eq!(WrOpcode::from_raw(14), Some(WrOpcode::Flush));
    assert_eq!(WrOpcode::from_raw(15), Some(WrOpcode::AtomicWrite));
    assert_eq!(WrOpcode::from_raw(11), None); // IBV_WR_DRIVER1
    assert_eq!(
        AsyncEventKind::from_raw(15),
        Some(AsyncEventKind::SrqLimitReached)
    );
    assert_eq!(AsyncEventKind::from_raw(19), None); // IBV_EVENT_WQ_FATAL
    for raw in 0..19 {
        assert_eq!(AsyncEventKind::from_raw(raw).map(|k| k.to_raw()), Some(raw));
    }
}
