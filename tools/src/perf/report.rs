//! Results and how they are printed: perftest's columns as text, or one JSON document.
//!
//! Units: MB/s is 10^6 bytes per second (perftest's default is 2^20; decimal units make the
//! ratio to the UDP baseline and the GB/s targets read directly), Mpps is 10^6 messages per
//! second, latencies are microseconds.

use std::fmt::Write as _;

pub use crate::json::{json_num, json_str};

/// What one bandwidth run measured.
#[derive(Debug, Clone, Default)]
pub struct BwResult {
    /// Message size.
    pub bytes: usize,
    /// Messages completed, all QPs together.
    pub iterations: u64,
    /// Wall time of the run.
    pub secs: f64,
    /// Highest bandwidth over a sampling window.
    pub peak_mbs: f64,
    /// Bytes / time.
    pub avg_mbs: f64,
    /// Messages / time, in millions per second.
    pub msg_rate_mpps: f64,
    /// Successful completions reaped (signaled WRs, or receives).
    pub completions: u64,
    /// Bytes compared with what was sent and found equal.
    pub verified_bytes: u64,
}

/// What one latency run measured, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct LatResult {
    /// Message size.
    pub bytes: usize,
    /// Round trips timed.
    pub iterations: u64,
    /// Shortest.
    pub min_us: f64,
    /// Median (perftest's t_typical).
    pub median_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Longest.
    pub max_us: f64,
    /// Half the round trip (SEND, WRITE) or the whole of it (READ, atomics), as perftest.
    pub half_round_trip: bool,
    /// Bytes compared with what was sent and found equal.
    pub verified_bytes: u64,
    /// With `--baseline`: what an empty poll of the CQ cost right after the test, ns (the
    /// busy-polled UDP ping-pong's counterpart is [`Baseline::empty_receive_ns`]). A
    /// ping-pong's half round trip follows it one for one.
    pub empty_poll_ns: Option<f64>,
}

impl LatResult {
    /// Statistics of `samples_ns` (sorted in place); `half` halves them.
    pub fn from_samples(bytes: usize, samples_ns: &mut [u64], half: bool) -> LatResult {
        samples_ns.sort_unstable();
        let n = samples_ns.len();
        let div = if half { 2000.0 } else { 1000.0 };
        let at = |q: f64| -> f64 {
            if n == 0 {
                return 0.0;
            }
            let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
            samples_ns[i] as f64 / div
        };
        let sum: u128 = samples_ns.iter().map(|&x| x as u128).sum();
        LatResult {
            bytes,
            iterations: n as u64,
            min_us: samples_ns.first().map_or(0.0, |&x| x as f64 / div),
            median_us: at(0.5),
            avg_us: if n == 0 {
                0.0
            } else {
                sum as f64 / n as f64 / div
            },
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: samples_ns.last().map_or(0.0, |&x| x as f64 / div),
            half_round_trip: half,
            verified_bytes: 0,
            empty_poll_ns: None,
        }
    }
}

/// The UDP baseline measured in the same command.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    /// Datagram size of a full packet of the message (the RoCE packet of one MTU, or of the
    /// whole message if smaller), as the equal-datagram methods send it.
    pub datagram_bytes: usize,
    /// The verb whose datagrams `bw_mbs` sends ("WRITE", "READ", ...).
    pub verb: String,
    /// UDP payload sizes of the datagrams of one message of that verb.
    pub verb_datagrams: Vec<usize>,
    /// The bandwidth baseline, MB/s of message bytes: raw UDP carrying exactly the datagrams
    /// messages of the verb put on the wire, in the GSO runs and sendmmsg calls softverbs
    /// groups them into (the same packet sizes and batching). Ratios are to this.
    pub bw_mbs: f64,
    /// The best raw UDP goodput with equal `datagram_bytes` datagrams, MB/s of payload: the
    /// path's ceiling, which a message whose packets differ in size cannot reach (a 64 KiB
    /// WRITE needs two GSO sends where 15 equal datagrams need one).
    pub uniform_mbs: f64,
    /// Which sending method gave `uniform_mbs`.
    pub uniform_method: String,
    /// The same datagrams as `bw_mbs`, MB/s of message bytes, sent as RoCE packets by the
    /// cheapest sender (laid out as the engine sends them, ICRC computed before every send,
    /// nothing else): the floor under any RoCE sender on this path; 0 where not measured.
    pub roce_floor_mbs: f64,
    /// Every method measured: (name, MB/s, Mpps).
    pub methods: Vec<(String, f64, f64)>,
    /// Median half round trip of a UDP ping-pong, microseconds: the lower of the two below.
    pub half_rtt_us: f64,
    /// ... with blocking receives (each answer wakes a sleeping thread).
    pub half_rtt_block_us: f64,
    /// ... with busy-polled non-blocking receives.
    pub half_rtt_spin_us: f64,
    /// The 99th percentile of that busy-polled ping-pong: the host's own tail, the floor
    /// under any latency target stated as a multiple of its median.
    pub half_rtt_spin_t99_us: f64,
    /// A non-blocking receive on an empty UDP socket, ns: what the busy-polled ping-pong's
    /// loop spends per turn on the socket.
    pub empty_receive_ns: f64,
}

/// Header line describing the run.
pub fn describe(parts: &[(&str, String)]) -> String {
    let body: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!("--- softverbs perf: {}", body.join(", "))
}

/// Column header of bandwidth results.
pub fn bw_header(with_ratio: bool) -> String {
    let mut s = format!(
        " {:>10} {:>12} {:>16} {:>18} {:>15}",
        "#bytes", "#iterations", "BW peak[MB/s]", "BW average[MB/s]", "MsgRate[Mpps]"
    );
    if with_ratio {
        s.push_str("   vs UDP");
    }
    s
}

/// One bandwidth row.
pub fn bw_row(r: &BwResult, ratio: Option<f64>) -> String {
    let mut s = format!(
        " {:>10} {:>12} {:>16.2} {:>18.2} {:>15.6}",
        r.bytes, r.iterations, r.peak_mbs, r.avg_mbs, r.msg_rate_mpps
    );
    if let Some(x) = ratio {
        let _ = write!(s, "   {:>5.1}%", x * 100.0);
    }
    s
}

/// Column header of latency results.
pub fn lat_header(with_ratio: bool, half: bool) -> String {
    let mut s = format!(
        " {:>10} {:>12} {:>10} {:>13} {:>10} {:>10} {:>11} {:>10}",
        "#bytes",
        "#iterations",
        "t_min[us]",
        "t_typical[us]",
        "t_avg[us]",
        "t_99[us]",
        "t_99.9[us]",
        "t_max[us]"
    );
    if with_ratio {
        s.push_str("   x UDP");
    }
    if half {
        s.push_str("   (half round trip)");
    } else {
        s.push_str("   (full round trip)");
    }
    s
}

/// One latency row.
pub fn lat_row(r: &LatResult, ratio: Option<f64>) -> String {
    let mut s = format!(
        " {:>10} {:>12} {:>10.2} {:>13.2} {:>10.2} {:>10.2} {:>11.2} {:>10.2}",
        r.bytes, r.iterations, r.min_us, r.median_us, r.avg_us, r.p99_us, r.p999_us, r.max_us
    );
    if let Some(x) = ratio {
        let _ = write!(s, "   {x:>5.2}x");
    }
    s
}

/// A bandwidth result as a JSON object.
pub fn bw_json(r: &BwResult, ratio: Option<f64>) -> String {
    format!(
        "{{\"bytes\":{},\"iterations\":{},\"secs\":{},\"bw_peak_mbs\":{},\"bw_avg_mbs\":{},\
         \"msg_rate_mpps\":{},\"completions\":{},\"verified_bytes\":{},\"ratio_to_udp\":{}}}",
        r.bytes,
        r.iterations,
        json_num(r.secs),
        json_num(r.peak_mbs),
        json_num(r.avg_mbs),
        json_num(r.msg_rate_mpps),
        r.completions,
        r.verified_bytes,
        ratio.map_or("null".into(), json_num)
    )
}

/// A latency result as a JSON object.
pub fn lat_json(r: &LatResult, ratio: Option<f64>) -> String {
    format!(
        "{{\"bytes\":{},\"iterations\":{},\"t_min_us\":{},\"t_typical_us\":{},\"t_avg_us\":{},\
         \"t_99_us\":{},\"t_99_9_us\":{},\"t_max_us\":{},\"half_round_trip\":{},\
         \"verified_bytes\":{},\"ratio_to_udp\":{},\"empty_poll_ns\":{}}}",
        r.bytes,
        r.iterations,
        json_num(r.min_us),
        json_num(r.median_us),
        json_num(r.avg_us),
        json_num(r.p99_us),
        json_num(r.p999_us),
        json_num(r.max_us),
        r.half_round_trip,
        r.verified_bytes,
        ratio.map_or("null".into(), json_num),
        r.empty_poll_ns.map_or("null".into(), json_num)
    )
}

/// The baseline as a JSON object.
pub fn baseline_json(b: &Baseline) -> String {
    let methods: Vec<String> = b
        .methods
        .iter()
        .map(|(name, mbs, mpps)| {
            format!(
                "{{\"method\":{},\"bw_mbs\":{},\"mpps\":{}}}",
                json_str(name),
                json_num(*mbs),
                json_num(*mpps)
            )
        })
        .collect();
    let sizes: Vec<String> = b.verb_datagrams.iter().map(|n| n.to_string()).collect();
    format!(
        "{{\"datagram_bytes\":{},\"verb\":{},\"verb_datagrams\":[{}],\"bw_mbs\":{},\
         \"uniform_mbs\":{},\"uniform_method\":{},\"roce_floor_mbs\":{},\"methods\":[{}],\
         \"half_rtt_us\":{},\
         \"half_rtt_block_us\":{},\"half_rtt_spin_us\":{},\"half_rtt_spin_t99_us\":{},\
         \"empty_receive_ns\":{}}}",
        b.datagram_bytes,
        json_str(&b.verb),
        sizes.join(","),
        json_num(b.bw_mbs),
        json_num(b.uniform_mbs),
        json_str(&b.uniform_method),
        json_num(b.roce_floor_mbs),
        methods.join(","),
        json_num(b.half_rtt_us),
        json_num(b.half_rtt_block_us),
        json_num(b.half_rtt_spin_us),
        json_num(b.half_rtt_spin_t99_us),
        json_num(b.empty_receive_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_and_halving() {
        let mut v: Vec<u64> = (1..=1000).map(|x| x * 1000).collect();
        v.reverse();
        let r = LatResult::from_samples(8, &mut v, true);
        assert_eq!(r.iterations, 1000);
        assert_eq!(r.min_us, 0.5);
        assert_eq!(r.median_us, 250.0);
        assert_eq!(r.p99_us, 495.0);
        assert_eq!(r.p999_us, 499.5);
        assert_eq!(r.max_us, 500.0);
        let full = LatResult::from_samples(8, &mut [3000], false);
        assert_eq!((full.min_us, full.median_us, full.max_us), (3.0, 3.0, 3.0));
        assert_eq!(LatResult::from_samples(8, &mut [], true).iterations, 0);
    }

    #[test]
    fn json_escapes() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(json_num(f64::NAN), "null");
    }
}
