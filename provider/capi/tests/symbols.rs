//! The symbol test: every symbol@version of rdma-core 44's libibverbs and librdmacm is
//! exported by the drop-in with the same default / compat binding (from the committed
//! lists, and from the system's libibverbs.so.1 / librdmacm.so.1 when they are installed),
//! and so is every one of the nodes newer releases added (symbols/libibverbs-newer.symbols).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// (name, version, default?) of every versioned dynamic symbol `objdump -T` lists in `lib`
/// (the node-marker symbols left out) whose version starts with `prefix`, or None without
/// objdump.
fn exported_with(lib: &Path, prefix: &str) -> Option<BTreeSet<(String, String, bool)>> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().ok()?;
    assert!(out.status.success(), "objdump -T {lib:?} failed");
    let mut set = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f.contains(&"*UND*") {
            continue;
        }
        let (version, name) = (f[f.len() - 2], f[f.len() - 1]);
        let default = !version.starts_with('(');
        let version = version.trim_matches(|c| c == '(' || c == ')');
        if !version.starts_with(prefix) || name == version {
            continue;
        }
        set.insert((name.to_string(), version.to_string(), default));
    }
    Some(set)
}

/// The libibverbs symbols of `lib`.
fn exported(lib: &Path) -> Option<BTreeSet<(String, String, bool)>> {
    exported_with(lib, "IBVERBS_")
}

fn committed_list(text: &str) -> BTreeSet<(String, String, bool)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string(), f[2] != "compat")
        })
        .collect()
}

#[test]
fn every_rdma_core_44_symbol_version_is_exported() {
    let ours = match exported(&common::built_library()) {
        Some(s) => s,
        None => {
            eprintln!("SKIPPED: objdump is not installed (apt-get install binutils)");
            return;
        }
    };
    let want = committed_list(include_str!("../symbols/libibverbs-44.symbols"));
    assert_eq!(want.len(), 180, "the committed list of rdma-core 44");
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    let system = Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    if system.exists() {
        let theirs = exported(system).unwrap();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        assert!(
            missing.is_empty(),
            "the system's libibverbs exports these, we do not: {missing:?}"
        );
    } else {
        eprintln!("note: no system libibverbs.so.1 to compare with (apt-get install libibverbs1)");
    }
}

#[test]
fn the_library_is_named_libibverbs_so_1() {
    let Ok(out) = Command::new("readelf")
        .arg("-d")
        .arg(common::built_library())
        .output()
    else {
        eprintln!("SKIPPED: readelf is not installed (apt-get install binutils)");
        return;
    };
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("Library soname: [libibverbs.so.1]"), "{t}");
}

#[test]
fn every_symbol_version_of_newer_releases_is_exported() {
    let lib = common::built_library();
    let Some(ours) = exported(&lib) else {
        eprintln!("SKIPPED: objdump is not installed (apt-get install binutils)");
        return;
    };
    let want = committed_list(include_str!("../symbols/libibverbs-newer.symbols"));
    assert_eq!(want.len(), 344, "the committed list of releases 45 ... 65");
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // The private node of each release is complete: its versioned driver entry point
    // (verbs_register_driver_<n>) and what programs import from it.
    for n in [34, 57, 59, 64, 65] {
        let node = format!("IBVERBS_PRIVATE_{n}");
        for name in [
            format!("verbs_register_driver_{n}"),
            "ibv_query_gid_type".into(),
        ] {
            assert!(
                ours.iter().any(|(s, v, _)| *s == name && *v == node),
                "{name}@{node} missing"
            );
        }
    }
    // The nodes themselves are defined (the loader checks a program's required versions
    // against these definitions before anything else).
    let out = Command::new("objdump")
        .arg("-p")
        .arg(&lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let defined: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|v| v.starts_with("IBVERBS_"))
        .collect();
    for node in [
        "IBVERBS_1.15",
        "IBVERBS_1.16",
        "IBVERBS_1.17",
        "IBVERBS_1.18",
        "IBVERBS_PRIVATE_57",
        "IBVERBS_PRIVATE_59",
        "IBVERBS_PRIVATE_64",
        "IBVERBS_PRIVATE_65",
    ] {
        assert!(defined.contains(node), "{node} is not defined: {defined:?}");
    }
}

#[test]
fn every_rdma_core_44_librdmacm_symbol_version_is_exported() {
    let Some(ours) = exported_with(&common::built_library(), "RDMACM_") else {
        eprintln!("SKIPPED: objdump is not installed (apt-get install binutils)");
        return;
    };
    let want = committed_list(include_str!("../symbols/librdmacm-44.symbols"));
    assert_eq!(
        want.len(),
        68,
        "the committed list of rdma-core 44's librdmacm"
    );
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    assert_eq!(ours.len(), want.len(), "exported beyond the list: {ours:?}");
    let system = Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    if system.exists() {
        let theirs = exported_with(system, "RDMACM_").unwrap();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        assert!(
            missing.is_empty(),
            "the system's librdmacm exports these, we do not: {missing:?}"
        );
    } else {
        eprintln!("note: no system librdmacm.so.1 to compare with (apt-get install librdmacm1)");
    }
}
