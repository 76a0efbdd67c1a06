//! The rxe interop lab from the test suite, opt in: with a lab up (`softverbs rxe-lab up`),
//! `cargo test -p softverbs-tools --test rxe_lab -- --ignored` runs a quick subset of the
//! scenarios against kernel rxe. It is ignored by default, so `cargo test --workspace`
//! never needs a VM and counts it as ignored, not passed; run on purpose without a lab, it
//! fails. The CI set is `softverbs rxe-lab run` (or tools/rxe-lab/ci.sh), all of it `run --full`.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");

#[test]
#[ignore = "needs an rxe lab that is up (softverbs rxe-lab up); run with -- --ignored"]
fn rc_write_and_rc_pingpong_against_kernel_rxe() {
    for only in ["RC WRITE", "ibv_rc_pingpong 1025 B", "UD SEND"] {
        let out = Command::new(BIN)
            .args(["rxe-lab", "run", "--mtu", "1024", "--only", only])
            .output()
            .expect("run softverbs rxe-lab");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_ne!(
            out.status.code(),
            Some(77),
            "no usable lab, so nothing was tested:\n{text}"
        );
        assert!(out.status.success(), "{only}:\n{text}");
        assert!(text.contains(" passed, 0 failed"), "{text}");
        assert!(!text.contains("FAIL"), "{text}");
    }
}
