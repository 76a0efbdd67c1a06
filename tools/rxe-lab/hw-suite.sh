#!/usr/bin/env bash
# The hardware backend (provider feature `hw`) on kernel rxe, in an rxe lab that is already
# up (tools/rxe-lab/lab.sh up; SOFTVERBS_LAB_RUN / SOFTVERBS_LAB_PORT_BASE select which lab).
#
# Builds the backend-generic suite (tests/tests/backend_suite) with `--features hw` on the
# host, copies it into the guest (both Debian 12: the binary links the guest's
# libibverbs.so.1) and runs it there: the same test bodies on emulated devices and on the
# guest's rxe device (rxe0), then the differential check of the two. Prints the suite's
# summary and one verdict line; exits 1 if anything failed.
#
# Where it cannot run (no lab up, no rdma-core development files on the host, no rxe device
# in the guest) it prints "hw backend on rxe skipped: <reason>" and exits 0 — or 1 with
# SOFTVERBS_LAB_REQUIRED=1. A skipped run is never reported as passed.
#
# Usage (from anywhere in the repository): tools/rxe-lab/hw-suite.sh [SUITE-ARGS...]
set -uo pipefail
cd "$(dirname "$0")/../.."
lab=tools/rxe-lab/lab.sh
suite_timeout_s=${SOFTVERBS_HW_SUITE_TIMEOUT:-1200}

skip() {
    echo "hw backend on rxe skipped: $*"
    if [ "${SOFTVERBS_LAB_REQUIRED:-0}" = 1 ]; then exit 1; fi
    exit 0
}

started=$SECONDS
env_out=$("$lab" env 2>&1) || skip "no rxe lab is up (${env_out}; run $lab up first)"
"$lab" ssh true 2>/dev/null || skip "the lab's guest does not answer over ssh"
pkg-config --exists libibverbs librdmacm 2>/dev/null ||
    skip "the host lacks rdma-core development files (apt-get install libibverbs-dev librdmacm-dev clang libclang-dev pkg-config)"

# The test executable: cargo's JSON messages name it.
json=$(cargo test -p softverbs-conformance --features hw --test backend_suite --no-run \
    --message-format=json 2>/tmp/softverbs-hw-suite-build.log) ||
    { tail -n 30 /tmp/softverbs-hw-suite-build.log; echo "hw-suite: FAILED: cargo build (log: /tmp/softverbs-hw-suite-build.log)"; exit 1; }
bin=$(printf '%s\n' "$json" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "backend_suite":
        print(m["executable"])')
[ -n "$bin" ] && [ -x "$bin" ] || { echo "hw-suite: FAILED: no backend_suite executable in cargo's output"; exit 1; }
built=$((SECONDS - started))

device=$("$lab" ssh "ibv_devices | awk 'NR > 2 { print \$1; exit }'" 2>/dev/null)
[ -n "$device" ] || skip "no rdma-core device in the guest (ibv_devices lists none)"

# Debug information is not needed in the guest and makes the copy 15 times larger.
stripped=$(mktemp /tmp/softverbs-hw-suite.XXXXXX)
trap 'rm -f "$stripped"' EXIT
objcopy --strip-debug "$bin" "$stripped" 2>/dev/null || cp "$bin" "$stripped"
"$lab" ssh 'cat > /tmp/backend_suite && chmod +x /tmp/backend_suite' < "$stripped" ||
    { echo "hw-suite: FAILED: copying the suite into the guest"; exit 1; }

run_started=$SECONDS
out=$("$lab" ssh "cd /tmp && SOFTVERBS_HW_DEVICE=$device SOFTVERBS_HW_REQUIRED=1 timeout $suite_timeout_s ./backend_suite $*" 2>&1)
rc=$?
ran=$((SECONDS - run_started))
printf '%s\n' "$out"
versions=$(tr '\n' ' ' < "${SOFTVERBS_LAB_RUN:-${SOFTVERBS_LAB_CACHE:-/var/cache/softverbs/rxe-lab}/run}/versions" 2>/dev/null)
summary=$(printf '%s\n' "$out" | grep -E '^(backend |differential emu vs hw:)' | tr '\n' ';')
if [ $rc -eq 0 ]; then
    echo "hw-suite: passed on $device ($versions) in ${ran} s (build ${built} s): $summary"
else
    [ $rc -eq 124 ] && echo "hw-suite: the suite did not finish within ${suite_timeout_s} s"
    echo "hw-suite: FAILED on $device (exit $rc) after ${ran} s: $summary"
    exit 1
fi
