#!/usr/bin/env bash
# Short fuzz run of every target (the CI stage), or a longer one:
#   fuzz/run.sh [SECONDS_PER_TARGET]   (default 20; e.g. 3600 for a long run)
# Installs cargo-fuzz if absent, builds the targets with AddressSanitizer on nightly,
# seeds each corpus from the captures (fuzz-seeds), runs each target and prints one line per
# target: runs, exec/s, coverage. A crash fails the script; its input is left in
# fuzz/artifacts/<target>/ (see docs/fuzzing.md for turning it into a regression).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
# The sanitizer build is cached outside the clone when the cache dir is writable.
cache=/var/cache/softverbs/fuzz-target
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then target_dir="$cache"; else target_dir=fuzz/target; fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    # Like the lab stage: a machine without the tool says so; SOFTVERBS_FUZZ_REQUIRED=1
    # makes that fatal.
    echo "fuzz skipped: no nightly toolchain (rustup toolchain install nightly)" >&2
    [ "${SOFTVERBS_FUZZ_REQUIRED:-0}" = 1 ] && exit 1
    exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked -q
fi
start=$(date +%s)
# The workspace's release profile uses fat LTO, under which the sanitizer-coverage symbols
# of one crate go missing at link time (rust-lld: undefined symbol __sancov_gen_*).
CARGO_PROFILE_RELEASE_LTO=false \
    cargo +nightly fuzz build -O -a --target-dir "$target_dir" >/tmp/softverbs-fuzz-build.log 2>&1 ||
    { tail -n 30 /tmp/softverbs-fuzz-build.log; echo "fuzz: build failed" >&2; exit 1; }
echo "fuzz: built in $(( $(date +%s) - start )) s"
# The targets read the captures at run time (rc_pair's templates). A cached build may come
# from another clone, whose compile-time path to them can be gone: name this clone's.
export SOFTVERBS_CONFORMANCE_DIR="${SOFTVERBS_CONFORMANCE_DIR:-$PWD/conformance}"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cargo run -q -p softverbs-fuzz --bin fuzz-seeds -- "$corpus"
bin="$target_dir/x86_64-unknown-linux-gnu/release"
for target in parse roundtrip device_rx rc_pair; do
    mkdir -p "fuzz/artifacts/$target"
    log="$corpus/$target.log"
    if ! "$bin/$target" "$corpus/$target" -max_total_time="$seconds" -rss_limit_mb=1024 \
        -artifact_prefix="fuzz/artifacts/$target/" >"$log" 2>&1; then
        tail -n 40 "$log"
        # A Rust panic's message sits above its (long) stack trace: say it last.
        grep -m 1 -A 1 "panicked at" "$log" || true
        echo "fuzz: $target FAILED (input in fuzz/artifacts/$target/)" >&2
        exit 1
    fi
    grep -E 'DONE' "$log" | tail -n 1 | awk -v t="$target" \
        '{print "fuzz: " t ": runs " substr($1,2) ", cov " $4 ", features " $6 ", exec/s " $12}'
done
echo "fuzz: all targets clean in $(( $(date +%s) - start )) s"
