//! `softverbs run -- PROGRAM` end to end, through the real `softverbs` binary (not through
//! LD_LIBRARY_PATH set by the test): Debian's unmodified `ibv_devinfo` and an
//! `ibv_rc_pingpong` pair (two processes, two emulated devices, data checked by the program
//! itself), the library found both beside the binary (as `cargo build` leaves it) and by
//! `--lib`; `--print-env`; and the errors for a missing program, a missing library and
//! `SOFTVERBS_PROVIDER=hw`. Programs that are not installed skip with the package to install.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const LIMIT: Duration = Duration::from_secs(60);

/// The drop-in cargo built for this test (the dev-dependency's cdylib, in deps/ beside the
/// test executable).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let lib = exe.parent().expect("deps").join("libsoftverbs_ibverbs.so");
    assert!(
        lib.is_file(),
        "the drop-in was not built at {}",
        lib.display()
    );
    lib
}

/// A copy of the layout `cargo build -p softverbs-ibverbs -p softverbs-tools` leaves: the
/// binary (a hard link, so that it finds its own directory) with the library beside it, in
/// a directory of the test `name` (tests run in parallel).
fn installed_layout(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("run-cli-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("softverbs");
    let _ = std::fs::remove_file(&bin);
    if std::fs::hard_link(BIN, &bin).is_err() {
        std::fs::copy(BIN, &bin).unwrap();
    }
    let lib = dir.join("libsoftverbs_ibverbs.so");
    let _ = std::fs::remove_file(&lib);
    std::os::unix::fs::symlink(built_library(), &lib).unwrap();
    bin
}

fn installed(program: &str, package: &str) -> Option<PathBuf> {
    let p = Path::new("/usr/bin").join(program);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("SKIPPED: {program} is not installed (apt-get install {package})");
        None
    }
}

/// `softverbs run` (binary `bin`) on the devices 127.22.<slot>.1 and .2, environment clean of
/// what would change the result.
fn run_cmd(bin: &Path, slot: u8) -> Command {
    let mut c = Command::new(bin);
    c.arg("run")
        .env(
            "SOFTVERBS_DEVICES",
            format!("127.22.{slot}.1,127.22.{slot}.2"),
        )
        .env_remove("SOFTVERBS_PROVIDER")
        .env_remove("SOFTVERBS_LIBIBVERBS")
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` up to the limit (killing it after); its output and whether it ended in time.
fn wait(mut child: Child) -> (Output, bool) {
    let started = Instant::now();
    while started.elapsed() < LIMIT {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    (child.wait_with_output().unwrap(), false)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ibv_devinfo_through_softverbs_run_lists_the_emulated_devices() {
    let Some(devinfo) = installed("ibv_devinfo", "ibverbs-utils") else {
        return;
    };
    let bin = installed_layout("devinfo");
    let (out, in_time) = wait(
        run_cmd(&bin, 50)
            .arg("--")
            .arg(&devinfo)
            .arg("-v")
            .spawn()
            .unwrap(),
    );
    let t = text(&out);
    assert!(in_time && out.status.success(), "{t}");
    for want in [
        "hca_id:\tsoftrxe0",
        "hca_id:\tsoftrxe1",
        "PORT_ACTIVE",
        "::ffff:127.22.50.1",
        "::ffff:127.22.50.2",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
}

#[test]
fn ibv_rc_pingpong_pair_through_softverbs_run() {
    let Some(pingpong) = installed("ibv_rc_pingpong", "ibverbs-utils") else {
        return;
    };
    // The library named explicitly here (the other tests find it beside the binary).
    let lib = built_library();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let common = ["-g", "1", "-n", "200", "-s", "4096", "-c", "-p", &port];
    let server = run_cmd(Path::new(BIN), 51)
        .arg("--lib")
        .arg(&lib)
        .arg("--")
        .arg(&pingpong)
        .args(["-d", "softrxe0"])
        .args(common)
        .spawn()
        .unwrap();
    // The server listens once it has its QP; the client retries its connect until then.
    let started = Instant::now();
    let client = loop {
        let out = run_cmd(Path::new(BIN), 51)
            .arg("--lib")
            .arg(&lib)
            .arg("--")
            .arg(&pingpong)
            .args(["-d", "softrxe1"])
            .args(common)
            .arg("127.0.0.1")
            .spawn()
            .unwrap();
        let (out, in_time) = wait(out);
        let t = text(&out);
        if t.contains("Couldn't connect") && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        assert!(in_time, "client did not finish:\n{t}");
        break out;
    };
    let (server, server_in_time) = wait(server);
    let (st, ct) = (text(&server), text(&client));
    assert!(
        server_in_time && server.status.success(),
        "server:\n{st}\nclient:\n{ct}"
    );
    assert!(client.status.success(), "client:\n{ct}\nserver:\n{st}");
    // 200 round trips of 4096 bytes each way, checked by the program (-c).
    for t in [&st, &ct] {
        assert!(
            t.contains("1638400 bytes in") && t.contains("200 iters"),
            "{t}"
        );
    }
}

#[test]
fn print_env_names_a_directory_holding_the_drop_in() {
    let bin = installed_layout("print-env");
    let out = run_cmd(&bin, 52)
        .env("LD_LIBRARY_PATH", "/opt/elsewhere")
        .arg("--print-env")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let path = line
        .strip_prefix("LD_LIBRARY_PATH=")
        .unwrap_or_else(|| panic!("{line}"));
    let (first, rest) = path.split_once(':').unwrap_or((path, ""));
    assert_eq!(rest, "/opt/elsewhere", "the old path must follow: {line}");
    // One library under both names: librdmacm's ibverbs objects are the drop-in's own.
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        let link = Path::new(first).join(name);
        assert_eq!(
            std::fs::canonicalize(&link).unwrap(),
            std::fs::canonicalize(built_library()).unwrap(),
            "{} does not lead to the drop-in",
            link.display()
        );
    }
}

#[test]
fn errors_are_clear_and_exit_non_zero() {
    let bin = installed_layout("errors");
    // No program named.
    let out = run_cmd(&bin, 53).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("name a program"), "{}", text(&out));
    // A program that does not exist.
    let out = run_cmd(&bin, 53)
        .args(["--", "/nonexistent/softverbs-no-such-program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(text(&out).contains("cannot run"), "{}", text(&out));
    // No library where --lib says.
    let out = run_cmd(&bin, 53)
        .args(["--lib", "/nonexistent/lib.so", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not built"), "{}", text(&out));
    // Hardware asked for.
    let out = run_cmd(&bin, 53)
        .env("SOFTVERBS_PROVIDER", "hw")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("emulated devices only"),
        "{}",
        text(&out)
    );
}
