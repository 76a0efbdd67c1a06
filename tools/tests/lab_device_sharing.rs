//! The rxe lab's kind of device (a qemu socket link: Ethernet frames over one UDP socket) is
//! shared by the processes that open it, as a UDP device is (docs/shared-devices.md, "How
//! the lab device is shared"): two processes holding it and a third listing it see three
//! members in three slots; with `SOFTVERBS_SHARE_PORT=0` a process binds the frames socket
//! alone as before and gets a clear EADDRINUSE while others hold it. No qemu is needed: the
//! frames socket is bound either way. Addresses: 127.36.x (this branch's range).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// A lab-like device on its own frames ports, beside a UDP device.
const DEVICES: &str = "lab36=10.77.0.1@127.36.0.1:48951/127.36.0.1:48952/9000,udp36=127.36.0.2";

fn devices_verbose() -> String {
    devices_verbose_with(&[])
}

/// `softverbs devices -v` with extra environment `env`.
fn devices_verbose_with(env: &[(&str, &str)]) -> String {
    let o = Command::new(BIN)
        .envs(env.iter().copied())
        .env("SOFTVERBS_DEVICES", DEVICES)
        .env_remove("SOFTVERBS_PROVIDER")
        .args(["devices", "-v"])
        .output()
        .expect("run softverbs devices");
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The part of `devices -v` about device `name`.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out
        .find(&format!("hca_id:\t{name}\n"))
        .unwrap_or_else(|| panic!("{name} listed: {out}"));
    let rest = &out[start + 1..];
    &out[start..start + 1 + rest.find("hca_id:").unwrap_or(rest.len())]
}

/// A process holding a device open; killed and reaped when dropped, so that a failing
/// assertion does not leave it behind.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process that opens `device` and keeps it open (a ping-pong server waiting for a peer,
/// which never comes).
fn holder(device: &str, listen: &str) -> Holder {
    Holder(
        Command::new(BIN)
            .env("SOFTVERBS_DEVICES", DEVICES)
            .env_remove("SOFTVERBS_PROVIDER")
            .args(["pingpong", "-d", device, "--listen", listen])
            .args(["--timeout-secs", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder"),
    )
}

/// How many other processes `devices -v` lists with one QP (a holder's ping-pong QP).
fn holders_with_a_qp(section: &str) -> usize {
    section
        .lines()
        .filter(|l| l.contains("\tslot ") && !l.contains("this one") && l.ends_with("qps 1"))
        .count()
}

#[test]
fn two_processes_share_the_lab_device_as_a_udp_device_is_shared() {
    let holders = [
        holder("lab36", "127.36.0.1:48960"),
        holder("lab36", "127.36.0.1:48962"),
        holder("udp36", "127.36.0.2:48961"),
    ];
    // The holders join and create their QP within a second or two; wait until all are
    // seen (bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = devices_verbose();
        if section(&out, "lab36").contains("shared by 3 processes")
            && holders_with_a_qp(section(&out, "lab36")) == 2
            && section(&out, "udp36").contains("shared by 2 processes")
        {
            break out;
        }
        assert!(Instant::now() < deadline, "holders never seen: {out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for name in ["lab36", "udp36"] {
        let s = section(&out, name);
        assert!(!s.contains("not opened"), "{s}");
        assert!(s.contains("(softverbs, this one)"), "{s}");
    }
    let lab = section(&out, "lab36");
    assert!(lab.contains("::ffff:10.77.0.1"), "{lab}");
    let mut slots: Vec<&str> = lab
        .lines()
        .filter_map(|l| l.trim().strip_prefix("slot "))
        .map(|l| l.split('\t').next().unwrap_or("").trim())
        .collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 3, "three members in three slots: {lab}");

    // Opting out binds the frames socket alone, which the members' sockets refuse.
    let alone = devices_verbose_with(&[("SOFTVERBS_SHARE_PORT", "0")]);
    let lab = section(&alone, "lab36");
    assert!(
        lab.contains("binding frames socket 127.36.0.1:48951 for lab36")
            && lab.contains("os error 98"),
        "EADDRINUSE naming the frames socket: {lab}"
    );

    drop(holders);
    // The holders gone, the device opens with this process as its only member.
    let out = devices_verbose();
    let lab = section(&out, "lab36");
    assert!(lab.contains("shared by 1 processes"), "{lab}");
}
