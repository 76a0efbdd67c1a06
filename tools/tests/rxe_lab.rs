//! The rxe interop lab from the test suite, opt in: with `SOFTVERBS_LAB_TESTS=1` and a lab up
//! (`softverbs rxe-lab up`), runs a quick subset of the scenarios against kernel rxe;
//! otherwise it says "rxe interop skipped" and returns, so `cargo test --workspace` never
//! needs a VM. The full set is `softverbs rxe-lab run` (or tools/rxe-lab/ci.sh).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

fn lab_requested() -> bool {
    std::env::var("SOFTVERBS_LAB_TESTS").is_ok_and(|v| v == "1")
}

#[test]
fn rc_write_and_rc_pingpong_against_kernel_rxe() {
    if !lab_requested() {
        eprintln!("rxe interop skipped: SOFTVERBS_LAB_TESTS=1 not set");
        return;
    }
    for only in ["RC WRITE", "ibv_rc_pingpong 1025 B"] {
        let out = Command::new(BIN)
            .args(["rxe-lab", "run", "--mtu", "1024", "--only", only])
            .output()
            .expect("run softverbs rxe-lab");
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.code() == Some(77) {
            eprintln!("{}", text.trim());
            return;
        }
        assert!(out.status.success(), "{only}:\n{text}");
        assert!(text.contains(" passed, 0 failed"), "{text}");
        assert!(!text.contains("FAIL"), "{text}");
    }
}
