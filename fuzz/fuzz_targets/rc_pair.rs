//! Fuzz target `rc_pair`: see `softverbs_fuzz::rc_pair`. Without libFuzzer (no `--cfg fuzzing`),
//! a program that replays the input files it is given.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| softverbs_fuzz::rc_pair::run(data));

#[cfg(not(fuzzing))]
fn main() -> std::process::ExitCode {
    softverbs_fuzz::replay::main(softverbs_fuzz::rc_pair::run)
}
