//! The printing of a `softverbs perf` run: perftest-style text, or one JSON document.

use super::args::{Settings, TestKind};
use super::report::{self, Baseline, LatResult};
use super::results::{ratio, ClientReport, Row, ServerRow};

pub fn print_baselines(s: &Settings, list: &[Baseline]) {
    if s.json {
        let items: Vec<String> = list.iter().map(report::baseline_json).collect();
        println!(
            "{{\"test\":\"udp-baseline\",\"cpus\":{},{},\"baseline\":[{}]}}",
            cpus(),
            load_json(s),
            items.join(",")
        );
        return;
    }
    println!(
        "--- softverbs perf udp-baseline: raw UDP 127.0.0.1 -> 127.0.0.2, {} CPUs",
        cpus()
    );
    println!(
        " {:>10} {:>10} {:>24} {:>12} {:>10} {:>14}",
        "#bytes", "datagram", "method", "BW[MB/s]", "Mpps", "half RTT[us]"
    );
    for (b, &size) in list.iter().zip(&s.sizes) {
        for (name, mbs, mpps) in &b.methods {
            println!(
                " {:>10} {:>10} {:>24} {:>12.2} {:>10.4} {:>14}",
                size, b.datagram_bytes, name, mbs, mpps, ""
            );
        }
        for (name, us) in [
            ("ping-pong, blocking", b.half_rtt_block_us),
            ("ping-pong, busy-poll", b.half_rtt_spin_us),
        ] {
            println!(
                " {:>10} {:>10} {:>24} {:>12} {:>10} {:>14.2}",
                size, b.datagram_bytes, name, "", "", us
            );
        }
    }
}

/// Datagram sizes as "4128 + 15 x 4112 B": runs of equal sizes counted.
fn datagram_list(sizes: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &n in sizes {
        match runs.last_mut() {
            Some((size, count)) if *size == n => *count += 1,
            _ => runs.push((n, 1)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(size, count)| match count {
            1 => size.to_string(),
            _ => format!("{count} x {size}"),
        })
        .collect();
    format!("{} B", parts.join(" + "))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The 1-minute load average at the start and now, as "0.52 -> 1.87".
fn load_text() -> String {
    let (then, now) = super::contend::load_then_and_now();
    let show = |x: Option<f64>| x.map_or("?".to_string(), |v| format!("{v:.2}"));
    format!("{} -> {}", show(then), show(now))
}

/// The load figures of the JSON documents: `"contenders":N,"load_start":x,"load_end":y`.
pub fn load_json(s: &Settings) -> String {
    let (then, now) = super::contend::load_then_and_now();
    let num = |x: Option<f64>| x.map_or("null".to_string(), report::json_num);
    format!(
        "\"contenders\":{},\"load_start\":{},\"load_end\":{}",
        s.contend,
        num(then),
        num(now)
    )
}

pub fn header(s: &Settings, device: &str, link: &str) -> String {
    report::describe(&[
        ("test", s.test.name().to_string()),
        ("RC QPs", s.qps.to_string()),
        ("device", device.to_string()),
        ("link", link.to_string()),
        ("MTU", s.mtu.to_string()),
        ("tx-depth", s.tx_depth.to_string()),
        ("post-list", s.post_list.to_string()),
        ("cq-mod", s.cq_mod.to_string()),
        ("inline", s.inline_size.to_string()),
        ("CPUs", cpus().to_string()),
        ("competitors", s.contend.to_string()),
        ("load", load_text()),
    ])
}

pub fn print_client(s: &Settings, link: &str, client: &ClientReport) {
    let ClientReport {
        device,
        rows,
        served,
        baselines,
        memory,
        round_ratios,
        server_here,
    } = client;
    let opt = |x: Option<u64>| x.map_or("null".to_string(), |v| v.to_string());
    let with_ratio = !baselines.is_empty();
    let base_of = |i: usize| baselines.get(i);
    // What the server checked of the size of row i.
    let server_verified = |i: usize| {
        let size = rows.get(i).map(Row::size);
        served
            .iter()
            .filter(|r| Some(r.size) == size)
            .map(|r| r.verified_bytes)
            .sum::<u64>()
    };
    if s.json {
        let items: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| match row {
                Row::Bw(r) => {
                    let mut r = r.clone();
                    r.verified_bytes += server_verified(i);
                    report::bw_json(&r, ratio(row, base_of(i)))
                }
                Row::Lat(r) => {
                    let mut r = r.clone();
                    r.verified_bytes += server_verified(i);
                    report::lat_json(&r, ratio(row, base_of(i)))
                }
            })
            .collect();
        let bases: Vec<String> = baselines.iter().map(report::baseline_json).collect();
        println!(
            "{{\"test\":{},\"device\":{},\"link\":{},\"qps\":{},\"mtu\":{},\"tx_depth\":{},\
             \"post_list\":{},\"cq_mod\":{},\"inline\":{},\"cpus\":{},{},\"results\":[{}],\
             \"baseline\":[{}],\"round_ratios\":[{}],\"rss_before_bytes\":{},\"rss_connected_bytes\":{}}}",
            report::json_str(s.test.name()),
            report::json_str(device),
            report::json_str(link),
            s.qps,
            s.mtu,
            s.tx_depth,
            s.post_list,
            s.cq_mod,
            s.inline_size,
            cpus(),
            load_json(s),
            items.join(","),
            bases.join(","),
            round_ratios
                .iter()
                .map(|list| {
                    let nums: Vec<String> = list.iter().map(|&x| report::json_num(x)).collect();
                    format!("[{}]", nums.join(","))
                })
                .collect::<Vec<_>>()
                .join(","),
            opt(memory.before),
            opt(memory.connected)
        );
        return;
    }
    println!("{}", header(s, device, link));
    if s.test.is_latency() {
        let half = !matches!(s.test, TestKind::ReadLat | TestKind::AtomicLat);
        println!("{}", report::lat_header(with_ratio, half));
    } else {
        println!("{}", report::bw_header(with_ratio));
    }
    let mut verified = 0u64;
    for (i, row) in rows.iter().enumerate() {
        let x = ratio(row, base_of(i));
        match row {
            Row::Bw(r) => {
                verified += r.verified_bytes;
                println!("{}", report::bw_row(r, x));
            }
            Row::Lat(r) => {
                verified += r.verified_bytes;
                println!("{}", report::lat_row(r, x));
            }
        }
        verified += server_verified(i);
    }
    if with_ratio {
        for (i, (b, &size)) in baselines.iter().zip(&s.sizes).enumerate() {
            if let Some(ratios) = round_ratios.get(i).filter(|r| r.len() > 1) {
                let shown: Vec<String> = ratios
                    .iter()
                    .map(|&x| match s.test.is_latency() {
                        true => format!("{x:.2}x"),
                        false => format!("{:.1}%", x * 100.0),
                    })
                    .collect();
                println!(
                    "    {} rounds for {size} B, each the test then its baseline: {}; the row above is the median round",
                    ratios.len(),
                    shown.join(" ")
                );
            }
            println!(
                "    UDP baseline for {size} B: {:.2} MB/s raw UDP carrying the {}'s own datagrams ({}) as softverbs batches them; {:.2} MB/s with equal {} B datagrams ({}); ping-pong half RTT {:.2} us (blocking {:.2}, busy-poll {:.2}, busy-poll t_99 {:.2})",
                b.bw_mbs,
                b.verb,
                datagram_list(&b.verb_datagrams),
                b.uniform_mbs,
                b.datagram_bytes,
                b.uniform_method,
                b.half_rtt_us,
                b.half_rtt_block_us,
                b.half_rtt_spin_us,
                b.half_rtt_spin_t99_us
            );
            let floor_measured = b.roce_floor_mbs > 0.0 && b.bw_mbs > 0.0;
            if let Some(Row::Bw(r)) = rows.get(i).filter(|_| floor_measured) {
                println!(
                    "    the same datagrams as RoCE packets from the cheapest sender (laid out as softverbs sends them, ICRC computed before every send, nothing else): {:.2} MB/s, {:.1}% of raw UDP; the test is {:.1}% of it",
                    b.roce_floor_mbs,
                    100.0 * b.roce_floor_mbs / b.bw_mbs,
                    100.0 * r.avg_mbs / b.roce_floor_mbs
                );
            }
            if let Some(Row::Lat(LatResult {
                empty_poll_ns: Some(poll),
                ..
            })) = rows.get(i)
            {
                println!(
                    "    an empty poll of the CQ after the test: {poll:.0} ns; a raw UDP receive that finds nothing: {:.0} ns",
                    b.empty_receive_ns
                );
            }
        }
    }
    if s.no_verify {
        println!("    data not checked (--no-verify), every completion successful");
    } else {
        let by = match (served.is_empty(), server_here) {
            (false, _) => " on both sides",
            (true, false) => " here (the server checks what it received)",
            (true, true) => " here",
        };
        println!("    verified{by}: {verified} bytes, every completion successful");
    }
    if let (Some(b), Some(c)) = (memory.before, memory.connected) {
        println!(
            "    memory: process RSS {:.1} MiB before opening, {:.1} MiB with {} connected idle QP pair(s)",
            b as f64 / (1 << 20) as f64,
            c as f64 / (1 << 20) as f64,
            s.qps
        );
    }
}

pub fn print_server(s: &Settings, device: &str, rows: &[ServerRow]) {
    if s.json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                let figures = r.report.map_or("null".to_string(), |p| {
                    format!(
                        "[{},{},{}]",
                        report::json_num(p.2),
                        report::json_num(p.3),
                        report::json_num(p.4)
                    )
                });
                format!(
                    "{{\"bytes\":{},\"iterations\":{},\"peer_figures\":{figures},\
                     \"handled\":{},\"verified_bytes\":{}}}",
                    r.size,
                    r.report.map_or("null".to_string(), |p| p.1.to_string()),
                    r.handled,
                    r.verified_bytes
                )
            })
            .collect();
        println!(
            "{{\"test\":{},\"role\":\"server\",\"device\":{},\"results\":[{}]}}",
            report::json_str(s.test.name()),
            report::json_str(device),
            items.join(",")
        );
        return;
    }
    println!("{}", header(s, device, "udp"));
    for r in rows {
        match r.report {
            Some(p) => println!(
                " {:>10} {:>12} the client's figures: peak {:.2} MB/s, average {:.2} MB/s, {:.6} Mpps; verified {} bytes",
                p.0, p.1, p.2, p.3, p.4, r.verified_bytes
            ),
            None => println!(
                " {:>10} {:>12} messages received or answered here; verified {} bytes",
                r.size, r.handled, r.verified_bytes
            ),
        }
    }
}
