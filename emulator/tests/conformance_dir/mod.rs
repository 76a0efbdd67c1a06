//! Where the kernel-rxe captures are, for every test that reads them: the repository's own
//! `conformance/`, or `$SOFTVERBS_CONFORMANCE_DIR`.

use std::path::PathBuf;

/// The capture folder; panics, naming it, when it holds no README (a broken checkout).
pub fn conformance_dir() -> PathBuf {
    let dir = std::env::var_os("SOFTVERBS_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance")));
    assert!(
        dir.join("README.md").is_file(),
        "conformance captures missing at {}",
        dir.display()
    );
    dir
}
