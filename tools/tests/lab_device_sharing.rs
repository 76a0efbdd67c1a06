//! The rxe lab's kind of device (a qemu socket link: Ethernet frames over one UDP socket) is
//! per process today, unlike a UDP device: a second process that opens it gets a clear
//! EADDRINUSE naming the frames socket, and opens it once the holder has gone. When the lab
//! device becomes shared (docs/shared-devices.md, "The lab device: not shared yet"), this
//! test is to be turned round. No qemu is needed: the frames socket is bound either way.
//! Addresses: 127.36.x (this branch's range).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// A lab-like device on its own frames ports, beside a UDP device.
const DEVICES: &str = "lab36=10.77.0.1@127.36.0.1:48951/127.36.0.1:48952/9000,udp36=127.36.0.2";

fn devices_verbose() -> String {
    let o = Command::new(BIN)
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

#[test]
fn a_second_process_on_the_lab_device_gets_eaddrinuse_while_a_udp_device_is_shared() {
    let holders = [
        holder("lab36", "127.36.0.1:48960"),
        holder("udp36", "127.36.0.2:48961"),
    ];
    // The holders bind within a second or two; wait until both are seen (bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = devices_verbose();
        if section(&out, "lab36").contains("not opened")
            && section(&out, "udp36").contains("shared by 2 processes")
        {
            break out;
        }
        assert!(Instant::now() < deadline, "holders never seen: {out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let lab = section(&out, "lab36");
    assert!(
        lab.contains("binding frames socket 127.36.0.1:48951 for lab36")
            && lab.contains("os error 98"),
        "EADDRINUSE naming the frames socket: {lab}"
    );
    let udp = section(&out, "udp36");
    assert!(udp.contains("(softverbs, this one)"), "{udp}");
    assert_eq!(udp.matches("\tslot ").count(), 2, "{udp}");

    drop(holders);
    // The holder gone, the lab device opens again (its error was the holder's socket).
    let out = devices_verbose();
    let lab = section(&out, "lab36");
    assert!(!lab.contains("not opened"), "{lab}");
    assert!(lab.contains("::ffff:10.77.0.1"), "{lab}");
}
