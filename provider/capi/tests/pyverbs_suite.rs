//! rdma-core's own test suite (python3-pyverbs ships it in /usr/share/doc/rdma-core/tests)
//! run through the drop-in on an emulated device: no test may fail or error. Skips are the
//! suite's own, from capability queries (docs/capi.md lists them per module).

mod common;

use std::path::Path;
use std::process::Command;

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
const PYTHON: &str = "/usr/bin/python3";

/// A copy of the suite with every module unpacked (it ships gzipped), in `name` under the
/// target's temporary directory.
fn unpacked_suite(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(SUITE).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".gz") {
            let out = Command::new("gzip")
                .arg("-dc")
                .arg(&path)
                .output()
                .expect("gzip");
            assert!(out.status.success(), "gzip -dc {path:?}");
            std::fs::write(dir.join(stem), out.stdout).unwrap();
        } else if path.is_file() {
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    dir
}

#[test]
fn rdma_core_test_suite_passes() {
    if !Path::new(SUITE).join("run_tests.py").exists() || !Path::new(PYTHON).exists() {
        eprintln!("SKIPPED: rdma-core's tests are not installed (apt-get install python3-pyverbs)");
        return;
    }
    let dir = unpacked_suite("rdma-core-tests");
    let out = common::on_dropin(Path::new(PYTHON), 40)
        .arg(dir.join("run_tests.py"))
        .args(["--dev", "softrxe0", "--gid", "1", "-v"])
        .output()
        .unwrap();
    let t = common::text(&out);
    let summary = t
        .lines()
        .rev()
        .find(|l| l.starts_with("OK") || l.starts_with("FAILED"));
    eprintln!("rdma-core tests on softverbs: {summary:?}");
    let failed: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("FAIL:") || l.starts_with("ERROR:"))
        .collect();
    assert!(
        failed.is_empty() && out.status.success(),
        "failures:\n{}\n\n{t}",
        failed.join("\n")
    );
    let passed = t.lines().filter(|l| l.ends_with("... ok")).count();
    assert!(passed >= 86, "only {passed} tests passed:\n{t}");
}

/// The suite's rdma_cm tests (test_rdmacm) need what a kernel device has and an emulated
/// one cannot: a network interface of the device's address under
/// /sys/class/infiniband/DEV/device/net/ (base.py finds the address there, with `ip`).
/// So they run in a network and mount namespace of their own (root, as CI is): loopback
/// holds the device's address alone, and a tmpfs over /sys/class names `lo` as the
/// device's interface. Nothing else changes; all ten tests pass, the three multicast
/// ones included (loopback carries the group).
const RDMACM_NAMESPACE_SCRIPT: &str = r#"set -e
mount --make-rprivate /
ip link set lo up
ip addr del 127.0.0.1/8 dev lo
ip addr add 127.22.52.1/8 dev lo
mount -t tmpfs softverbs-sysfs /sys/class
mkdir -p /sys/class/infiniband/softrxe0/device/net/lo
exec "$PYTHON" "$SUITE_DIR/run_tests.py" --dev softrxe0 --gid 1 -v test_rdmacm
"#;

#[test]
fn rdmacm_tests_pass_in_a_namespace_of_their_own() {
    if !Path::new(SUITE).join("run_tests.py").exists() || !Path::new(PYTHON).exists() {
        eprintln!("SKIPPED: rdma-core's tests are not installed (apt-get install python3-pyverbs)");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        eprintln!("SKIPPED: the rdmacm tests need root and unshare (network namespace)");
        return;
    }
    let dir = unpacked_suite("rdma-core-rdmacm-tests");
    let out = common::on_dropin_devices(Path::new("/usr/bin/unshare"), "127.22.52.1")
        .args(["-m", "-n", "bash", "-c", RDMACM_NAMESPACE_SCRIPT])
        .env("PYTHON", PYTHON)
        .env("SUITE_DIR", &dir)
        .output()
        .unwrap();
    let t = common::text(&out);
    let ok = t.lines().filter(|l| l.ends_with("... ok")).count();
    eprintln!("rdma-core rdmacm tests on softverbs: {ok} passed");
    assert!(out.status.success(), "{t}");
    for test in [
        "test_rdmacm_sync_traffic",
        "test_rdmacm_async_traffic",
        "test_rdmacm_async_read",
        "test_rdmacm_async_write",
        "test_rdmacm_async_reject_traffic",
        "test_rdmacm_async_udp_traffic",
        "test_rdmacm_async_traffic_external_qp",
        "test_rdmacm_async_multicast_traffic",
        "test_rdmacm_async_ex_multicast_traffic",
        "test_rdmacm_async_ex_leave_multicast_traffic",
    ] {
        assert!(
            t.lines()
                .any(|l| l.starts_with(test) && l.ends_with("... ok")),
            "{test} did not pass:\n{t}"
        );
    }
}
