//! Turns the symbol lists of symbols/ (rdma-core 44's, then the nodes of newer releases) into
//! the library's ELF symbol versions: a linker
//! version script naming every node, and assembly trampolines that give each exported
//! `symbol@node` (or `symbol@@node`, the default) its implementation. Rust cannot attach a
//! version to a symbol itself, and `.symver` only applies to a symbol defined in the same
//! object, hence one small trampoline per symbol next to its `.symver` line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

struct Symbol {
    name: String,
    node: String,
    default: bool,
    kind: String,
}

/// The lists, oldest nodes first: the version script chains the public nodes in this order.
const LISTS: [&str; 3] = [
    "symbols/libibverbs-44.symbols",
    "symbols/libibverbs-newer.symbols",
    // librdmacm lives in the same library: its calls hand out the drop-in's own ibverbs
    // objects and share its devices (`softverbs run` links librdmacm.so.1 to this file too).
    "symbols/librdmacm-44.symbols",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let mut symbols = Vec::new();
    for list in LISTS {
        println!("cargo:rerun-if-changed={list}");
        let text = std::fs::read_to_string(list).expect("symbol list");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "bad line in {list}: {line}");
            symbols.push(Symbol {
                name: f[0].into(),
                node: f[1].into(),
                default: f[2] != "compat",
                kind: f[3].into(),
            });
        }
    }
    // A name may have one default version only (the linker would refuse two `@@`).
    let mut defaults = std::collections::BTreeSet::new();
    for s in symbols.iter().filter(|s| s.default) {
        assert!(
            defaults.insert(&s.name),
            "two default versions of {}",
            s.name
        );
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());

    // Version script: one node per version, in the order of the list, each inheriting from
    // the one before of its library (as rdma-core's maps chain IBVERBS_1.x and RDMACM_1.x);
    // the private nodes stand alone.
    let mut nodes: Vec<String> = Vec::new();
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &symbols {
        if !nodes.contains(&s.node) {
            nodes.push(s.node.clone());
        }
        members
            .entry(s.node.clone())
            .or_default()
            .push(s.name.clone());
    }
    let mut script = String::new();
    let mut previous: Option<&str> = None;
    for node in &nodes {
        let names = &members[node];
        let _ = writeln!(script, "{node} {{\n  global:");
        for n in names {
            let _ = writeln!(script, "    {n};");
        }
        let same_library = |p: &str| p.split('_').next() == node.split('_').next();
        let parent = match previous {
            Some(p) if !node.contains("PRIVATE") && same_library(p) => format!(" {p}"),
            _ => String::new(),
        };
        let _ = writeln!(script, "}}{parent};");
        if !node.contains("PRIVATE") {
            previous = Some(node);
        }
    }
    let script_path = out.join("libibverbs.map");
    std::fs::write(&script_path, script).unwrap();

    // Trampolines, emitted as the body of one global_asm! invocation.
    let mut asm = String::new();
    for (i, s) in symbols.iter().enumerate() {
        let at = if s.default { "@@" } else { "@" };
        let local = format!("__softverbs_sym{i}");
        if s.kind == "data" {
            let _ = write!(
                asm,
                ".data\n.balign 8\n.globl {local}\n.type {local},@object\n.size {local},8\n{local}:\n.quad 0\n.symver {local}, {}{at}{}\n",
                s.name, s.node
            );
            continue;
        }
        let target = match s.kind.as_str() {
            "impl" => format!("sv_{}", s.name.trim_start_matches('_')),
            "errno" => "sv_stub_errno".to_string(),
            "null" => "sv_stub_null".to_string(),
            "fail" => "sv_stub_fail".to_string(),
            "faillong" => "sv_stub_fail_long".to_string(),
            "void" => "sv_stub_void".to_string(),
            other => panic!("unknown kind {other} of {}", s.name),
        };
        let jump = if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("aarch64") {
            format!("b {target}")
        } else {
            format!("jmp {target}@PLT")
        };
        let _ = write!(
            asm,
            ".text\n.balign 16\n.globl {local}\n.type {local},@function\n{local}:\n{jump}\n.size {local}, .-{local}\n.symver {local}, {}{at}{}\n",
            s.name, s.node
        );
    }
    std::fs::write(out.join("symver.s"), asm).unwrap();

    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        script_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // Every trampoline must find its implementation when the library is linked.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
}
