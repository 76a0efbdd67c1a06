//! `softverbs devices -v --json` as the built binary, parsed as JSON: attributes, the port's
//! state and MTUs, the GID table as addresses with types, the counters.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

fn devices(args: &[&str], devices: &str) -> (bool, String) {
    let o = Command::new(BIN)
        .env("SOFTVERBS_DEVICES", devices)
        .env_remove("SOFTVERBS_PROVIDER")
        .arg("devices")
        .args(args)
        .output()
        .expect("run softverbs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

#[test]
fn verbose_json_describes_each_device_like_ibv_devinfo() {
    let (ok, out) = devices(&["-v", "--json"], "a=127.24.8.1,b=[::1]:47911");
    assert!(ok, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let list = doc["devices"].as_array().expect("devices");
    let emu: Vec<_> = list.iter().filter(|d| d["backend"] == "emu").collect();
    assert_eq!(emu.len(), 2, "{out}");
    let a = emu[0];
    assert_eq!(a["name"], "a");
    assert_eq!(a["address"], "127.24.8.1 udp/4791");
    assert_eq!(a["phys_port_cnt"], 1);
    assert_eq!(a["limits"]["max_qp_wr"], 16384);
    let port = &a["ports"][0];
    assert_eq!(port["state"], "active");
    assert_eq!(port["link_layer"], "Ethernet");
    assert!(port["active_mtu"].as_u64().unwrap() <= port["max_mtu"].as_u64().unwrap());
    let gids = port["gids"].as_array().expect("gids");
    assert_eq!(gids[1]["gid"], "::ffff:127.24.8.1", "{out}");
    assert_eq!(gids[1]["type"], "RoCE v2");
    assert!(gids[0]["gid"].as_str().unwrap().starts_with("fe80::"));
    for key in [
        "icrc_errors",
        "malformed_drops",
        "unknown_qp_drops",
        "delivered_packets",
    ] {
        assert!(a["counters"][key].is_u64(), "{key}: {out}");
    }
    assert_eq!(emu[1]["ports"][0]["gids"][1]["gid"], "::1", "{out}");
    assert_eq!(
        doc["selected_backend"].as_str().map(|s| &s[..3]),
        Some("emu")
    );
}

#[test]
fn the_plain_list_and_one_device() {
    let (ok, out) = devices(&[], "a=127.24.8.3,b=127.24.8.4");
    assert!(ok, "{out}");
    assert!(
        out.contains("a            emu  127.24.8.3 udp/4791"),
        "{out}"
    );
    let (ok, out) = devices(&["-v", "-d", "b"], "a=127.24.8.3,b=127.24.8.4");
    assert!(ok, "{out}");
    assert!(out.contains("hca_id:\tb"), "{out}");
    assert!(!out.contains("hca_id:\ta"), "{out}");
    assert!(
        out.contains("GID[  1]:\t\t::ffff:127.24.8.4, RoCE v2"),
        "{out}"
    );
    let (ok, out) = devices(&["-d", "nosuch"], "a=127.24.8.3");
    assert!(!ok && out.contains("nosuch"), "{out}");
}

/// A device whose address another process holds is shown with the reason, not fatal.
#[test]
fn a_device_that_cannot_be_opened_is_shown_with_why() {
    let _held = std::net::UdpSocket::bind("127.24.8.5:4791").expect("bind");
    let (ok, out) = devices(&["-v", "--json"], "held=127.24.8.5");
    assert!(ok, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let err = doc["devices"][0]["error"].as_str().expect("error");
    assert!(err.contains("in use"), "{err}");
}

/// Processes sharing a device are listed with their slots, pids and QP counts: this test
/// process holds the device open with three QPs while `softverbs devices -v` looks.
#[test]
fn verbose_lists_the_processes_sharing_a_device_and_their_qps() {
    let ip: std::net::IpAddr = "127.24.8.6".parse().unwrap();
    softverbs::register_device(softverbs::DeviceConfig::new("sharing", ip)).unwrap();
    let ctx = softverbs::Context::open("sharing").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let _qps: Vec<_> = (0..3)
        .map(|_| pd.qp_builder().build(&cq, &cq).unwrap())
        .collect();
    let slot = ctx.emulator().unwrap().shared_slot().expect("shared");
    let (ok, out) = devices(&["-v", "--json"], "sharing=127.24.8.6");
    assert!(ok, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let procs = doc["devices"][0]["processes"]
        .as_array()
        .expect("processes");
    assert_eq!(procs.len(), 2, "this test and the command itself: {out}");
    let me = procs
        .iter()
        .find(|p| p["pid"] == std::process::id())
        .expect("this process is listed");
    assert_eq!(
        (me["slot"].as_u64(), me["qps"].as_u64()),
        (Some(u64::from(slot)), Some(3))
    );
    assert_eq!(me["this"], false);
    let tool = procs
        .iter()
        .find(|p| p["this"] == true)
        .expect("the command");
    assert_eq!(tool["qps"], 0);
    assert_ne!(tool["slot"], me["slot"]);

    let (ok, out) = devices(&["-v", "-d", "sharing"], "sharing=127.24.8.6");
    assert!(ok, "{out}");
    assert!(out.contains("shared by 2 processes:"), "{out}");
    let line = format!("pid {:>7} (", std::process::id());
    let mine = out.lines().find(|l| l.contains(&line)).expect(&out);
    assert!(mine.ends_with("qps 3"), "{mine}");
}
