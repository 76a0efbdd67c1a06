//! CM timeouts as the kernel computes them (drivers/infiniband/core/cm.c and cma.c): IBA
//! time values are 4.096 us * 2^value, which the kernel rounds to 2^(value - 8) ms.

/// rdma_cm's CM response timeout value (CMA_CM_RESPONSE_TIMEOUT): 2^20 * 4.096 us ~ 4 s.
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// rdma_cm's CM retry count (CMA_MAX_CM_RETRIES).
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// Packet life time rdma_cm gives RoCE paths (CMA_IBOE_PACKET_LIFETIME), visible in a
/// kernel REQ as its local ACK timeout 19 (= 18 + 1 with rxe's ACK delay 15).
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 18;
/// The CA ACK delay rxe reports (and puts in a REP's target ACK delay).
pub const RXE_LOCAL_CA_ACK_DELAY: u8 = 15;
/// The service timeout rdma_cm puts in an MRA (CMA_CM_MRA_SETTING without the delay flag).
pub const CMA_CM_MRA_SETTING: u8 = 24;

const NS_PER_MS: u64 = 1_000_000;

/// The kernel's `cm_convert_to_ms`: an IBA time value, rounded to 2^(value - 8) ms.
pub fn iba_time_ms(value: u8) -> u64 {
    1u64 << value.saturating_sub(8).min(31)
}

/// [`iba_time_ms`] in nanoseconds.
pub fn iba_time_ns(value: u8) -> u64 {
    iba_time_ms(value) * NS_PER_MS
}

/// The kernel's `cm_ack_timeout`: a local ACK timeout covering the path's packet life time
/// and the peer CA's ACK delay.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = packet_life_time.min(31) + 1;
    let ca_ack_delay = ca_ack_delay.min(31);
    if t >= ca_ack_delay {
        t += u8::from(ca_ack_delay >= t - 1);
    } else {
        t = ca_ack_delay + u8::from(t >= ca_ack_delay.saturating_sub(1));
    }
    t.min(31)
}

/// How long the active side waits for a REP before resending the REQ: twice the packet
/// life time plus the peer's CM response time (ib_send_cm_req).
pub fn req_timeout_ns(packet_life_time: u8, remote_cm_response_timeout: u8) -> u64 {
    2 * iba_time_ns(packet_life_time) + iba_time_ns(remote_cm_response_timeout)
}

/// How long a sender waits after an MRA: the MRA's service timeout plus the path's ACK
/// timeout (cm_mra_handler).
pub fn mra_timeout_ns(service_timeout: u8, av_timeout: u8) -> u64 {
    iba_time_ns(service_timeout) + iba_time_ns(av_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values() {
        assert_eq!(iba_time_ms(20), 4096);
        assert_eq!(iba_time_ms(3), 1);
        assert_eq!(
            ack_timeout(RXE_LOCAL_CA_ACK_DELAY, CMA_IBOE_PACKET_LIFETIME),
            19
        );
        assert_eq!(ack_timeout(15, 10), 15);
        assert_eq!(ack_timeout(15, 13), 16);
        assert_eq!(ack_timeout(0, 31), 31);
        assert_eq!(ack_timeout(255, 255), 31);
        assert_eq!(
            req_timeout_ns(CMA_IBOE_PACKET_LIFETIME, CMA_CM_RESPONSE_TIMEOUT),
            6144 * NS_PER_MS
        );
        assert_eq!(iba_time_ms(255), 1 << 31);
    }
}
