//! Bad input from C never crashes the library: tests/c/bad_input.c, compiled against Debian's
//! verbs.h and linked with the drop-in, calls verbs with NULL pointers, destroyed handles and
//! wrong comp_mask / sizes, and checks each errno.

mod common;

use std::process::Command;

#[test]
fn bad_input_from_c_gets_errors_not_crashes() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!(
            "SKIPPED: /usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)"
        );
        return;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capi-bad-input");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("bad_input");
    let lib_dir = common::library_dir();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/bad_input.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-l:libibverbs.so.1")
        .arg("-Wl,-z,now")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: no C compiler ({cc}: {e}); apt-get install gcc");
            return;
        }
    };
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = common::on_dropin(&exe, 30).output().unwrap();
    let t = common::text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("checks passed"), "{t}");
}
