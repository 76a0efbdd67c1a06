//! Helpers of the drop-in's integration tests: where the built library is, a directory
//! that holds it as libibverbs.so.1, and running a Debian program pair (server + client)
//! on emulated devices of the test's own addresses (two devices, or one both share).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The library cargo built for this package (target/<profile>/libsoftverbs_ibverbs.so).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test>: `cargo test` leaves the library it built for the tests
    // beside them in deps/ (only `cargo build` copies it up to target/<profile>/, and a
    // copy there may be stale or absent on a fresh clone).
    let deps = exe.parent().expect("deps dir");
    let library = deps.join("libsoftverbs_ibverbs.so");
    assert!(
        library.is_file(),
        "the drop-in library is not at {}: without it the programs would load the \
         system's libibverbs instead",
        library.display()
    );
    library
}

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` (links to the built library,
/// which serves both), for LD_LIBRARY_PATH.
pub fn library_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("softverbs-capi-lib");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        let link = dir.join(name);
        let tmp = dir.join(format!(
            ".link.{name}.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(built_library(), &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
    }
    dir
}

/// The path of `program` if it is installed, else None after saying the test is skipped.
pub fn installed(program: &str, package: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return Some(p);
        }
    }
    eprintln!("SKIPPED: {program} is not installed (apt-get install {package})");
    None
}

/// A TCP port no one listens on now (the OS's choice).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The two emulated devices of test `slot`: softrxe0 on 127.22.<slot>.1, softrxe1 on
/// 127.22.<slot>.2 (addresses no user process holds; each test its own pair).
pub fn devices(slot: u8) -> String {
    format!("127.22.{slot}.1,127.22.{slot}.2")
}

/// A command for `program` on the drop-in with the devices of `slot`.
pub fn on_dropin(program: &Path, slot: u8) -> Command {
    on_dropin_devices(program, &devices(slot))
}

/// A command for `program` on the drop-in with `SOFTVERBS_DEVICES=devices`.
pub fn on_dropin_devices(program: &Path, devices: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", library_dir())
        .env("SOFTVERBS_DEVICES", devices)
        .env_remove("SOFTVERBS_PROVIDER")
        .env_remove("SOFTVERBS_FAULTS")
        // Sharing one device between processes is the default; a user's setting must not
        // turn it off under the tests that put both ends on one device.
        .env_remove("SOFTVERBS_SHARE_PORT");
    c
}

/// Waits for `child` up to `limit`, killing it after; its output and whether it exited in
/// time. Its pipes are drained meanwhile, so a program that prints more than a pipe holds
/// (rping -v with large messages) does not block on them.
pub fn wait(child: Child, limit: Duration) -> (Output, bool) {
    let mut child = child;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<_>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<_>));
    let start = Instant::now();
    let (status, in_time) = loop {
        match child.try_wait().unwrap() {
            Some(status) => break (status, true),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                break (child.wait().unwrap(), false);
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let output = Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    (output, in_time)
}

/// The last `max` bytes of `text` (whole lines kept readable), for failure messages.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut at = text.len() - max;
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}

/// The combined text of an output.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a server (`server_args`) and, once it listens, a client (`client_args`, which
/// name the server's address) of `program` on the devices of `slot`; both must exit 0.
/// Returns (server output, client output).
pub fn run_pair(
    program: &Path,
    slot: u8,
    server_args: &[String],
    client_args: &[String],
    limit: Duration,
) -> (String, String) {
    run_pair_on(program, &devices(slot), server_args, client_args, limit)
}

/// [`run_pair`] with `SOFTVERBS_DEVICES=devices` in both processes.
pub fn run_pair_on(
    program: &Path,
    devices: &str,
    server_args: &[String],
    client_args: &[String],
    limit: Duration,
) -> (String, String) {
    // One pair at a time: the machine may have two cores, and each program busy-polls.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = on_dropin_devices(program, devices)
        .args(server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Waited for (and its pipes drained) from now on, so that a server printing a lot
    // never blocks on a full pipe while the client runs.
    let server = std::thread::spawn(move || wait(server, limit));
    let start = Instant::now();
    // The client fails at once if the server does not listen yet: retry until it does.
    let client = loop {
        std::thread::sleep(Duration::from_millis(150));
        let c = on_dropin_devices(program, devices)
            .args(client_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, in_time) = wait(c, limit);
        let t = text(&out);
        let refused =
            !out.status.success() && t.contains("onnect") && !t.contains("remote address");
        if refused && start.elapsed() < Duration::from_secs(10) {
            continue;
        }
        assert!(in_time, "{program:?} client timed out:\n{}", tail(&t, 4000));
        break out;
    };
    let (server_out, in_time) = server.join().unwrap();
    let (s, c) = (text(&server_out), text(&client));
    assert!(
        in_time && server_out.status.success() && client.status.success(),
        "{program:?} {server_args:?} failed\n--- server ({:?}):\n{}\n--- client ({:?}):\n{}",
        server_out.status,
        tail(&s, 4000),
        client.status,
        tail(&c, 4000)
    );
    (s, c)
}

/// Compiles tests/c/`name`.c against Debian's headers, linked (BIND_NOW) with the drop-in
/// under each of `libs` (`libibverbs.so.1`, `librdmacm.so.1`); None (after saying why)
/// without a C compiler or the headers.
pub fn compile_c(name: &str, libs: &[&str]) -> Option<PathBuf> {
    for header in ["infiniband/verbs.h", "rdma/rdma_cma.h"] {
        if !Path::new("/usr/include").join(header).exists() {
            eprintln!(
                "SKIPPED: /usr/include/{header} is absent (apt-get install libibverbs-dev librdmacm-dev)"
            );
            return None;
        }
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capi-c-programs");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.arg(format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR")))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(library_dir());
    for lib in libs {
        cmd.arg(format!("-l:{lib}"));
    }
    let built = match cmd.arg("-Wl,-z,now").output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: no C compiler ({cc}: {e}); apt-get install gcc");
            return None;
        }
    };
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}
