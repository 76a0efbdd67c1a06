//! rdma-core's own test suite (python3-pyverbs ships it in /usr/share/doc/rdma-core/tests)
//! run through the drop-in on an emulated device: no test may fail or error. Skips are the
//! suite's own, from capability queries (docs/capi.md lists them per module).

mod common;

use std::path::Path;
use std::process::Command;

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn rdma_core_test_suite_passes() {
    if !Path::new(SUITE).join("run_tests.py").exists() || !Path::new(PYTHON).exists() {
        eprintln!("SKIPPED: rdma-core's tests are not installed (apt-get install python3-pyverbs)");
        return;
    }
    // The suite ships gzipped: a copy with every module unpacked.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-core-tests");
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
    let bad: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("FAIL:") || l.starts_with("ERROR:"))
        .collect();
    assert!(
        bad.is_empty() && out.status.success(),
        "failures:\n{}\n\n{t}",
        bad.join("\n")
    );
    let passed = t.lines().filter(|l| l.ends_with("... ok")).count();
    assert!(passed >= 80, "only {passed} tests passed:\n{t}");
}
