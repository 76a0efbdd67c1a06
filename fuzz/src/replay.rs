//! Running a harness over saved inputs: what a fuzz target binary does when built without
//! libFuzzer (`cargo run -p softverbs-fuzz --bin NAME -- FILE|DIR...`), and what the
//! regression tests do.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::Harness;

/// The files named, directories expanded to their files (sorted, not recursive).
pub fn input_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(path.clone());
        }
    }
    out
}

/// Runs `harness` on the file at `path`, naming it on stderr first (so that a panic's
/// output says which input it was).
pub fn run_file(harness: Harness, path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    eprintln!("replaying {} ({} bytes)", path.display(), data.len());
    harness(&data);
}

/// The `main` of a target built without libFuzzer: replays every file or directory given
/// on the command line.
pub fn main(harness: Harness) -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: TARGET FILE|DIR...  (replays inputs; build with cargo fuzz to fuzz)");
        return ExitCode::from(2);
    }
    let files = input_files(&args);
    for file in &files {
        run_file(harness, file);
    }
    eprintln!("{} inputs ran clean", files.len());
    ExitCode::SUCCESS
}
