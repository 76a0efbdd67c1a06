#!/usr/bin/env bash
# CI stage: the rxe interop lab (docs/rxe-lab.md). Builds (or reuses) the cached guest image,
# boots it, runs every scenario, and always tears the VM down.
#
# Where the lab cannot run (not root, no apt to install qemu/debootstrap, no Debian mirror,
# the guest does not boot) it prints "rxe interop skipped: <reason>" and exits 0 — unless
# SOFTVERBS_LAB_REQUIRED=1, then it exits 1. A scenario that runs and fails always fails
# the stage. A skipped stage is never reported as passed.
#
# Usage (from the repository root): tools/rxe-lab/ci.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
lab=tools/rxe-lab/lab.sh

skip() {
    echo "rxe interop skipped: $*"
    if [ "${SOFTVERBS_LAB_REQUIRED:-0}" = 1 ]; then exit 1; fi
    exit 0
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap builds the guest image)"
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v tshark >/dev/null || missing+=(tshark)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || skip "${missing[*]} missing and no apt-get to install them"
    echo "rxe-lab: installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >/tmp/softverbs-rxe-lab-apt.log 2>&1 ||
        skip "could not install ${missing[*]} (see /tmp/softverbs-rxe-lab-apt.log)"
fi

started=$SECONDS
# The drop-in libibverbs.so.1 (softverbs-ibverbs) too: `softverbs run` finds it beside the binary.
cargo build --release -q -p softverbs-tools -p softverbs-ibverbs || { echo "rxe-lab: cargo build failed"; exit 1; }
bin=target/release/softverbs

# Whatever happens from here on, the VM goes away.
"$bin" rxe-lab down >/dev/null 2>&1 || true
trap '"$bin" rxe-lab down >/dev/null 2>&1 || true' EXIT INT TERM

"$bin" rxe-lab build || skip "the guest image could not be built (no Debian mirror reachable?)"
"$bin" rxe-lab up || skip "the guest did not come up (see ${SOFTVERBS_LAB_RUN:-${SOFTVERBS_LAB_CACHE:-/var/cache/softverbs/rxe-lab}/run}/console.log)"

"$bin" rxe-lab run
rc=$?
case $rc in
    0) echo "rxe interop: all scenarios passed in $((SECONDS - started)) s" ;;
    77) skip "the lab was not usable for the scenarios" ;;
    *) echo "rxe interop: FAILED (exit $rc)"; exit 1 ;;
esac

# The hardware backend (feature hw) on the guest's kernel rxe, in the same lab. It says
# itself when and why it is skipped.
tools/rxe-lab/hw-suite.sh || { echo "rxe interop: the hw backend suite FAILED"; exit 1; }
