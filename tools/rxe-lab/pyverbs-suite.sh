#!/usr/bin/env bash
# rdma-core's own pyverbs test suite, on kernel rxe in the lab VM or on softverbs' drop-in,
# so that both columns of docs/capi.md's table come from one tool and one parser.
#
#   pyverbs-suite.sh rxe [--netdev] [TEST...]        on the guest's rxe0 (the lab must be up)
#   pyverbs-suite.sh softverbs [--netdev] [TEST...]  on the drop-in's softrxe0 (`softverbs run`)
#   pyverbs-suite.sh compare                         the tests whose outcome differs, rxe vs softverbs
#
# TEST narrows the run (unittest names: tests.test_mr, tests.test_mr.MRTest.test_dereg_mr).
# --netdev gives the device a network interface where the suite looks for its IP address
# (/sys/class/infiniband/DEV/device/net/): rxe0 has no parent device in sysfs and softrxe0 no
# sysfs at all, so without it test_rdmacm skips every test ("doesn't have net interface").
# It needs root (mount namespace; on softverbs also a network namespace, own loopback).
# Each run leaves pyverbs-<side>.log (the verbose output) and pyverbs-<side>.tsv (one line per
# test: id, outcome, skip message) in the lab's run dir, and prints a per-module summary.
# Settings: PYVERBS_TIMEOUT (s, default 1800: the TCG guest is slow), SOFTVERBS_BIN (default
# target/release/softverbs), SOFTVERBS_DEVICES (default 127.0.0.1,127.0.0.2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
lab=$here/lab.sh
suite_src=/usr/share/doc/rdma-core/tests  # python3-pyverbs' copy; the guest image drops /usr/share/doc
timeout_s=${PYVERBS_TIMEOUT:-1800}
run_dir=${SOFTVERBS_LAB_RUN:-${SOFTVERBS_LAB_CACHE:-/var/cache/softverbs/rxe-lab}/run}

die() { echo "pyverbs-suite: $*" >&2; exit 1; }

# The suite ships gzipped (Debian compresses docs); unittest needs plain .py files.
unpack_suite() {
    [ -d "$suite_src" ] || die "$suite_src missing (apt-get install python3-pyverbs)"
    suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
    trap 'rm -rf "$suite"' EXIT
    cp -r "$suite_src/." "$suite/"
    gunzip -f "$suite"/*.gz
    write_netdev_helper
}

# with-netdev.sh DEV IFACE CMD...: CMD in the current (fresh) mount namespace, with IFACE
# listed as DEV's net interface. Only the rdmacm tests read it (with --gid given, base.py uses
# the address for nothing else).
write_netdev_helper() {
    cat > "$suite/with-netdev.sh" <<'HELPER'
set -e
dev=$1 ifc=$2; shift 2
mount --make-rprivate /
if [ -e "/sys/class/infiniband/$dev" ]; then
    # A kernel device: an overlay on its sysfs directory takes the new entry; reads pass through.
    d=$(readlink -f "/sys/class/infiniband/$dev") w=$(mktemp -d)
    mkdir "$w/up" "$w/work"
    mount -t overlay netdev -o "lowerdir=$d,upperdir=$w/up,workdir=$w/work" "$d"
else
    # An emulated device: the drop-in reads no sysfs, so a tmpfs may hide /sys/class whole.
    mount -t tmpfs netdev /sys/class
    ip link set lo up
fi
mkdir -p "/sys/class/infiniband/$dev/device/net/$ifc"
exec "$@"
HELPER
}

# unittest -v prints "name (tests.module.Class.name)", maybe a docstring line, then
# "... outcome" (on a line of its own when the test wrote output meanwhile). A skip or error
# in setUpClass is reported once as "setUpClass (tests.module.Class)".
to_tsv() {
    awk '
        match($0, /^[A-Za-z_0-9]+ \(tests\.[A-Za-z_0-9.]+\)/) {
            id = substr($0, 1, RLENGTH); sub(/^.*\(tests\./, "", id); sub(/\)$/, "", id)
            if (substr($0, 1, 11) == "setUpClass ") id = id ".setUpClass"
        }
        id != "" && match($0, /(^|\.\.\. )(ok|FAIL|ERROR|expected failure|unexpected success|skipped .*)$/) {
            r = substr($0, RSTART); sub(/^\.\.\. /, "", r); msg = ""
            if (r ~ /^skipped /) { msg = substr(r, 9); r = "skip" }
            else if (r == "ok" || r == "unexpected success") r = "pass"
            else if (r == "expected failure") r = "xfail"
            else r = tolower(r)
            print id "\t" r "\t" msg; id = ""
        }' "$1"
}

summary() {
    awk -F'\t' '
        { split($1, p, "."); m = p[1]; mods[m] = 1; n[m, $2]++; t[$2]++; total++ }
        END {
            printf "%-28s %5s %5s %5s %5s\n", "module", "pass", "skip", "fail", "error"
            k = 0; for (m in mods) list[++k] = m
            for (i = 2; i <= k; i++) for (j = i; j > 1 && list[j-1] > list[j]; j--) {
                s = list[j]; list[j] = list[j-1]; list[j-1] = s }
            for (i = 1; i <= k; i++) { m = list[i]
                printf "%-28s %5d %5d %5d %5d\n", m, n[m,"pass"], n[m,"skip"], n[m,"fail"], n[m,"error"] }
            printf "%-28s %5d %5d %5d %5d   (%d tests)\n", "total", t["pass"], t["skip"], t["fail"], t["error"], total
        }' "$1"
}

# Runs "$@" with its output to the terminal and to pyverbs-$side.log, then summarises.
run_and_summarise() {
    local side=$1; shift
    local log=$run_dir/pyverbs-$side.log started=$SECONDS rc=0
    mkdir -p "$run_dir"
    { echo "# $(date -u +%FT%TZ) $versions"; "$@" 2>&1 || echo "# exit status $?"; } | tee "$log"
    to_tsv "$log" > "$run_dir/pyverbs-$side.tsv"
    echo "pyverbs-suite: $side, $((SECONDS - started)) s, log $log"
    summary "$run_dir/pyverbs-$side.tsv"
    grep -q '^# exit status 124$' "$log" && die "$side: timed out after $timeout_s s"
    # unittest exits 1 on any failure or error; the summary says which.
    grep -q '^# exit status' "$log" && rc=1
    return $rc
}

cmd_rxe() {
    "$lab" status >/dev/null || die "no lab is up (tools/rxe-lab/lab.sh up)"
    unpack_suite
    # lab.sh ssh passes stdin through, so the suite goes in as a tar stream (no scp in the guest).
    tar c -C "$suite" . | "$lab" ssh 'rm -rf /tmp/rdma-tests && mkdir -p /tmp/rdma-tests && tar x -C /tmp/rdma-tests'
    versions="rxe0 kernel $("$lab" ssh uname -r) pyverbs $("$lab" ssh "dpkg-query -W -f='\${Version}' python3-pyverbs") netdev=$netdev"
    local wrap=""
    [ "$netdev" = no ] || wrap="unshare -m sh with-netdev.sh rxe0 lab0"
    # GID 1 is rxe0's IPv4-mapped GID (10.77.0.2; index 0 is the IPv6 link-local one).
    # Two timeouts: the guest's stops the suite, the host's a hung ssh.
    run_and_summarise rxe timeout $((timeout_s + 60)) "$lab" ssh \
        "cd /tmp/rdma-tests && timeout $timeout_s $wrap python3 run_tests.py --dev rxe0 --gid 1 -v $*"
}

cmd_softverbs() {
    local bin=${SOFTVERBS_BIN:-$repo/target/release/softverbs}
    [ -x "$bin" ] || die "$bin missing (cargo build --release -p softverbs-tools -p softverbs-ibverbs)"
    unpack_suite
    versions="softrxe0 softverbs $(git -C "$repo" rev-parse --short HEAD) pyverbs $(dpkg-query -W -f='${Version}' python3-pyverbs) netdev=$netdev"
    local devices=${SOFTVERBS_DEVICES:-127.0.0.1,127.0.0.2} wrap=()
    # In a network namespace of its own, lo's first address (what the rdmacm tests take as the
    # device's) is 127.0.0.1, so softrxe0 must be there; nothing else can hold its port there.
    [ "$netdev" = no ] || { wrap=(unshare -m -n sh "$suite/with-netdev.sh" softrxe0 lo); devices=127.0.0.1,127.0.0.2; }
    # /usr/bin/python3: the system interpreter is the one with pyverbs (not a pyenv shim).
    SOFTVERBS_DEVICES=$devices run_and_summarise softverbs timeout "$timeout_s" "$bin" run -- \
        "${wrap[@]}" /usr/bin/python3 "$suite/run_tests.py" --dev softrxe0 --gid 1 -v "$@"
}

# Tests whose outcome differs, rxe's first: "id  rxe-outcome  softverbs-outcome  messages".
cmd_compare() {
    local a=$run_dir/pyverbs-rxe.tsv b=$run_dir/pyverbs-softverbs.tsv
    if [ ! -f "$a" ] || [ ! -f "$b" ]; then die "run both sides first ($a, $b)"; fi
    LC_ALL=C join -t $'\t' -a1 -a2 -e - -o 0,1.2,2.2,1.3,2.3 <(LC_ALL=C sort "$a") <(LC_ALL=C sort "$b") |
        awk -F'\t' '$2 != $3 { printf "%s\trxe %s\tsoftverbs %s\t%s\t%s\n", $1, $2, $3, $4, $5 }'
}

case "${1:-}" in
    rxe | softverbs)
        side=$1 netdev=no; shift
        if [ "${1:-}" = --netdev ]; then
            [ "$(id -u)" = 0 ] || die "--netdev needs root (mount namespace)"
            netdev=yes; shift
        fi
        "cmd_$side" "$@" ;;
    compare) cmd_compare ;;
    *) die "usage: pyverbs-suite.sh rxe|softverbs [--netdev] [TEST...] | compare" ;;
esac
