//! `softverbs run -- PROGRAM ARGS...`: runs an unmodified, already compiled verbs or
//! rdma_cm program on the emulator by putting softverbs' drop-in library (crate
//! softverbs-ibverbs) first on its library path under both names it serves,
//! `libibverbs.so.1` and `librdmacm.so.1` (one file: the loader maps it once, so the
//! ibverbs objects rdma_cm hands out are the drop-in's own). The program's other RDMA
//! libraries (the libmlx5 / libefa that perftest links) are the system's; they bind to the
//! drop-in's libibverbs symbols.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The file cargo builds for crate softverbs-ibverbs.
const BUILT_NAME: &str = "libsoftverbs_ibverbs.so";
/// Where a program looks for it.
const INSTALLED_NAMES: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];
/// Names the library to use instead of the one next to this executable.
pub const LIB_ENV: &str = "SOFTVERBS_LIBIBVERBS";

/// Arguments of `softverbs run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The drop-in library (default: $SOFTVERBS_LIBIBVERBS, else libsoftverbs_ibverbs.so
    /// beside this executable, as `cargo build` leaves it).
    #[arg(long)]
    pub lib: Option<PathBuf>,
    /// Only print the environment a CI script would set, then exit.
    #[arg(long)]
    pub print_env: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Runs the program (replacing this process); returns only on failure.
pub fn run(args: &RunArgs) -> ExitCode {
    match prepare(args) {
        Ok(dir) => {
            let path = library_path(&dir);
            if args.print_env {
                println!("LD_LIBRARY_PATH={}", path.to_string_lossy());
                return ExitCode::SUCCESS;
            }
            let Some((program, rest)) = args.command.split_first() else {
                eprintln!("softverbs run: name a program: softverbs run -- PROGRAM ARGS...");
                return ExitCode::from(2);
            };
            let err = Command::new(program)
                .args(rest)
                .env("LD_LIBRARY_PATH", path)
                .exec();
            eprintln!(
                "softverbs run: cannot run {}: {err}",
                program.to_string_lossy()
            );
            ExitCode::from(127)
        }
        Err(msg) => {
            eprintln!("softverbs run: {msg}");
            ExitCode::from(2)
        }
    }
}

/// The directory holding `libibverbs.so.1` and `librdmacm.so.1` (links to the drop-in),
/// made if needed.
fn prepare(args: &RunArgs) -> Result<PathBuf, String> {
    if std::env::var("SOFTVERBS_PROVIDER").is_ok_and(|v| v.trim() == "hw") {
        return Err(
            "SOFTVERBS_PROVIDER=hw: the drop-in serves emulated devices only; \
             run the program directly (without softverbs run) to use the system's rdma-core"
                .into(),
        );
    }
    let lib = find_library(args.lib.clone())?;
    let dir = lib
        .parent()
        .ok_or("the library has no directory")?
        .join("softverbs-run");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for name in INSTALLED_NAMES {
        let link = dir.join(name);
        // Replace the link each time: the library may have moved or been rebuilt elsewhere.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&lib, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("linking {} to {}: {e}", link.display(), lib.display()))?;
    }
    Ok(dir)
}

fn find_library(explicit: Option<PathBuf>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match explicit
        .or_else(|| std::env::var_os(LIB_ENV).map(PathBuf::from))
    {
        Some(p) => vec![p],
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("locating softverbs: {e}"))?;
            let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
            // Beside the binary (target/debug/softverbs), or one up when run from deps/.
            let mut list = vec![dir.join(BUILT_NAME)];
            if let Some(up) = dir.parent() {
                list.push(up.join(BUILT_NAME));
            }
            list
        }
    };
    for c in &candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("resolving {}: {e}", c.display()));
        }
    }
    Err(format!(
        "the drop-in library is not built (looked for {}); build it with \
         `cargo build -p softverbs-ibverbs -p softverbs-tools` (or name it with --lib / {LIB_ENV})",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// `dir` first, then whatever LD_LIBRARY_PATH already held.
fn library_path(dir: &Path) -> OsString {
    let mut path = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    path
}
