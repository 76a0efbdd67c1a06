//! Programs built against rdma-core releases newer than 44 start and run on the drop-in.
//!
//! For each row of symbols/releases (the version nodes a program of that release links
//! to), the test builds a stub libibverbs.so.1 that defines exactly those nodes (from the
//! committed symbol lists), links tests/c/newer_abi.c against it (BIND_NOW) together with
//! a generated table that references every symbol of those nodes, checks that the program
//! really requires the release's newest public node and its private node, and runs it with
//! the drop-in in the stub's place, on two emulated devices of 127.32.<slot>.x.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of a symbol list: (name, node, default binding?, kind).
type Line = (String, String, bool, String);

fn lists() -> Vec<Line> {
    let text = [
        include_str!("../symbols/libibverbs-44.symbols"),
        include_str!("../symbols/libibverbs-newer.symbols"),
    ]
    .concat();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].into(), f[1].into(), f[2] != "compat", f[3].into())
        })
        .collect()
}

/// (last release of the row, newest public node, private node) of symbols/releases.
fn releases() -> Vec<(u32, String, String)> {
    include_str!("../symbols/releases")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1].parse().unwrap(), f[2].into(), f[3].into())
        })
        .collect()
}

/// The minor number of a public node (IBVERBS_1.<n>).
fn minor(node: &str) -> Option<u32> {
    node.strip_prefix("IBVERBS_1.")?.parse().ok()
}

/// The symbols a program of a release links to: node → [(name, is data)], public nodes in
/// order. A name's default binding is what a program links to, so compat lines are left
/// out of the public nodes; the private node is taken whole.
fn release_nodes(newest: &str, private: &str) -> Vec<(String, Vec<(String, bool)>)> {
    let newest = minor(newest).unwrap();
    let mut nodes: BTreeMap<(u32, String), Vec<(String, bool)>> = BTreeMap::new();
    for (name, node, default, kind) in lists() {
        let key = match minor(&node) {
            Some(m) if m <= newest && default => (m, node),
            None if node == private => (u32::MAX, node),
            _ => continue,
        };
        nodes.entry(key).or_default().push((name, kind == "data"));
    }
    nodes.into_iter().map(|((_, n), s)| (n, s)).collect()
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn run_cc(args: &[&std::ffi::OsStr]) {
    let out = Command::new(cc())
        .args(args)
        .output()
        .expect("a C compiler");
    assert!(
        out.status.success(),
        "cc {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the stub library (dir/stub/libibverbs.so.1) and the reference table (dir/refs.c).
fn stub_and_refs(dir: &Path, nodes: &[(String, Vec<(String, bool)>)]) -> (PathBuf, PathBuf) {
    let (mut script, mut stub, mut refs) = (String::new(), String::new(), String::new());
    let mut table = String::new();
    let mut parent: Option<&str> = None;
    let mut count = 0;
    for (node, symbols) in nodes {
        let _ = writeln!(script, "{node} {{ global:");
        for (name, data) in symbols {
            let _ = writeln!(script, "  {name};");
            if *data {
                let _ = writeln!(stub, "int {name};");
                let _ = writeln!(refs, "extern int {name};");
            } else {
                let _ = writeln!(stub, "void {name}(void) {{}}");
                let _ = writeln!(refs, "extern void {name}(void);");
            }
            let _ = writeln!(table, "  (void *)&{name},");
            count += 1;
        }
        let private = node.contains("PRIVATE");
        let _ = match (parent, private) {
            (Some(p), false) => writeln!(script, "}} {p};"),
            _ => writeln!(script, "}};"),
        };
        if !private {
            parent = Some(node);
        }
    }
    let _ = write!(
        refs,
        "void *const newer_abi_refs[] = {{\n{table}}};\nconst unsigned newer_abi_ref_count = {count};\n"
    );
    let stub_dir = dir.join("stub");
    std::fs::create_dir_all(&stub_dir).unwrap();
    std::fs::write(dir.join("stub.map"), script).unwrap();
    std::fs::write(dir.join("stub.c"), stub).unwrap();
    std::fs::write(dir.join("refs.c"), refs).unwrap();
    let map = format!("-Wl,--version-script={}", dir.join("stub.map").display());
    run_cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-Wl,-soname,libibverbs.so.1".as_ref(),
        map.as_ref(),
        dir.join("stub.c").as_os_str(),
        "-o".as_ref(),
        stub_dir.join("libibverbs.so.1").as_os_str(),
    ]);
    (stub_dir, dir.join("refs.c"))
}

/// Compiles `sources` (and defines among them) with the reference table into `exe`, linked
/// BIND_NOW against the stub libibverbs.so.1 of `stub_dir`.
fn link_against_stub(sources: &[&std::ffi::OsStr], refs: &Path, stub_dir: &Path, exe: &Path) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["-fPIC".as_ref()];
    args.extend_from_slice(sources);
    args.extend_from_slice(&[
        refs.as_os_str(),
        "-o".as_ref(),
        exe.as_os_str(),
        "-L".as_ref(),
        stub_dir.as_os_str(),
        "-Wl,--no-as-needed".as_ref(),
        "-l:libibverbs.so.1".as_ref(),
        "-Wl,-z,now".as_ref(),
    ]);
    run_cc(&args);
}

/// The version nodes `exe` requires of libibverbs.so.1 (`objdump -p`'s "required from").
fn required_versions(exe: &Path) -> Vec<String> {
    let out = Command::new("objdump").arg("-p").arg(exe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut versions = Vec::new();
    let mut in_ibverbs = false;
    for line in text.lines() {
        if line.starts_with("  required from ") {
            in_ibverbs = line.contains("libibverbs.so.1");
        } else if in_ibverbs {
            if let Some(v) = line
                .split_whitespace()
                .last()
                .filter(|v| v.starts_with("IBVERBS_"))
            {
                versions.push(v.to_string());
            }
        }
    }
    versions
}

fn build_and_run(release: u32, newest: &str, private: &str, slot: u8) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("newer-abi-{release}"));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = release_nodes(newest, private);
    assert!(
        nodes.iter().any(|(n, _)| n == private),
        "{private} in the lists"
    );
    let (stub_dir, refs) = stub_and_refs(&dir, &nodes);
    let exe = dir.join("newer_abi");
    let source = format!("{}/tests/c/newer_abi.c", env!("CARGO_MANIFEST_DIR"));
    let define = format!("-DRELEASE={release}");
    link_against_stub(&[define.as_ref(), source.as_ref()], &refs, &stub_dir, &exe);
    // The program is one of that release: it needs the release's nodes, which Debian's
    // rdma-core 44 does not have (the loader would refuse it before main).
    let required = required_versions(&exe);
    for node in [newest, private] {
        assert!(
            required.iter().any(|v| v == node),
            "{exe:?} requires {required:?}, not {node}"
        );
    }
    let child = common::on_dropin(&exe, 0)
        .env(
            "SOFTVERBS_DEVICES",
            format!("127.32.{slot}.1,127.32.{slot}.2"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (out, in_time) = common::wait(child, std::time::Duration::from_secs(60));
    let text = common::text(&out);
    assert!(
        in_time && out.status.success(),
        "release {release}:\n{text}"
    );
    let count: usize = nodes.iter().map(|(_, s)| s.len()).sum();
    assert!(
        text.contains(&format!("newer_abi {release}: {count} symbols bound")),
        "{text}"
    );
    eprintln!("{}", text.trim());
}

fn tools_present() -> bool {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!(
            "SKIPPED: /usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)"
        );
        return false;
    }
    if Command::new(cc()).arg("--version").output().is_err()
        || Command::new("objdump").arg("--version").output().is_err()
    {
        eprintln!("SKIPPED: no C compiler or objdump (apt-get install gcc binutils)");
        return false;
    }
    true
}

#[test]
fn programs_of_every_supported_release_start_and_run() {
    if !tools_present() {
        return;
    }
    let rows = releases();
    assert_eq!(rows.len(), 6, "releases 44-56, 57-58, 59-61, 62-63, 64, 65");
    for (slot, (release, newest, private)) in rows.iter().enumerate() {
        build_and_run(*release, newest, private, slot as u8 + 1);
    }
}

#[test]
fn a_program_needing_a_node_we_lack_is_refused_by_the_loader() {
    // The check above is only meaningful if the loader really refuses a missing node:
    // a program of an imaginary release with IBVERBS_PRIVATE_99 must not start.
    if !tools_present() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("newer-abi-99");
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = vec![(
        "IBVERBS_PRIVATE_99".to_string(),
        vec![("ibv_query_gid_type".to_string(), false)],
    )];
    let (stub_dir, refs) = stub_and_refs(&dir, &nodes);
    let main = dir.join("main.c");
    std::fs::write(
        &main,
        "extern void *const newer_abi_refs[];\nint main(void) { return newer_abi_refs[0] == 0; }\n",
    )
    .unwrap();
    let exe = dir.join("needs99");
    link_against_stub(&[main.as_os_str()], &refs, &stub_dir, &exe);
    let out = common::on_dropin(&exe, 0).output().unwrap();
    let text = common::text(&out);
    assert!(!out.status.success(), "started without the node: {text}");
    assert!(
        text.contains("IBVERBS_PRIVATE_99") && text.contains("not found"),
        "{text}"
    );
}
