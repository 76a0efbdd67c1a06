#!/usr/bin/env bash
# Instructions per message of the data path, counted by callgrind. Unlike times they do not
# move with the machine's load or with other tenants, so one run of each of two builds
# compares them (SOFTVERBS_BIN=path/to/other/softverbs for the second); the quiet SEND
# ping-pong's distance from raw UDP is mostly these instructions (docs/benchmarks.md,
# "Fewer instructions per message").
#
#   tools/bench/instructions.sh        # about ten seconds; needs valgrind
#
# Traffic stays on loopback (the tool's own --loopback devices).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
    { echo "instructions: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
if [ -z "${SOFTVERBS_BIN:-}" ]; then
    cargo build --release -q -p softverbs-tools
fi
bin=${SOFTVERBS_BIN:-target/release/softverbs}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# A ping-pong of N round trips (2N messages) and a WRITE stream of M messages.
N=3000
M=100000
valgrind --tool=callgrind --callgrind-out-file="$out/lat" \
    "$bin" perf send_lat --loopback -s 8 -n "$N" -t 128 >"$out/lat.log" 2>&1 ||
    { tail -n 20 "$out/lat.log"; echo "instructions: send_lat failed" >&2; exit 1; }
# The empty polls `--baseline` times after a short ping-pong (100,000 of them), counted
# alone. Some 45 instructions more when the ping-pong's last datagrams came in pairs (then
# an empty receive is a 2-slot recvmmsg, not a recvfrom): which way it ends depends on the
# threads' timing under valgrind, so on a busy machine this row moves by that much.
valgrind --tool=callgrind --callgrind-out-file="$out/empty" --dump-instr=yes --toggle-collect='*lat::empty_poll_ns*' \
    "$bin" perf send_lat --loopback -s 8 -n 200 -t 128 --baseline --rounds 1 >"$out/empty.log" 2>&1 ||
    { tail -n 20 "$out/empty.log"; echo "instructions: send_lat --baseline failed" >&2; exit 1; }
# The same ping-pong counted only inside the calls each message makes (post_send, post_recv,
# the datagram's receive), instruction by instruction, for the locked ones (see below).
valgrind --tool=callgrind --callgrind-out-file="$out/locked" --dump-instr=yes \
    --toggle-collect='*QpDataPath>::post_send' --toggle-collect='*QpDataPath>::post_recv' \
    --toggle-collect='*Device>::receive' \
    "$bin" perf send_lat --loopback -s 8 -n "$N" -t 128 >"$out/locked.log" 2>&1 ||
    { tail -n 20 "$out/locked.log"; echo "instructions: send_lat (locked) failed" >&2; exit 1; }
valgrind --tool=callgrind --callgrind-out-file="$out/bw" \
    "$bin" perf write_bw --loopback --link inproc -s 64 -n "$M" >"$out/bw.log" 2>&1 ||
    { tail -n 20 "$out/bw.log"; echo "instructions: write_bw failed" >&2; exit 1; }

# Inclusive instructions of the first function whose line contains PATTERN (n/a if none).
inclusive() {
    callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
        awk -v pat="$2" 'index($0, pat) { gsub(",", "", $1); print $1; found = 1; exit }
                         END { if (!found) print "n/a" }'
}
# Calls of the functions whose name ends with PATTERN, from the profile's call records
# (`cfn=(id) name` names a callee once, `cfn=(id)` refers to it again, `calls=N` follows).
calls() {
    awk -v pat="$2" '
        /^c?fn=\([0-9]+\) / { id = $1; sub(/^c?fn=/, "", id); name[id] = substr($0, index($0, " ") + 1) }
        /^cfn=/ { id = $1; sub(/^cfn=/, "", id); callee = id }
        /^calls=/ {
            n = $1; sub(/^calls=/, "", n); f = name[callee]
            if (substr(f, length(f) - length(pat) + 1) == pat) total += n
        }
        END { print total + 0 }' "$1"
}
# Locked instructions (atomic read-modify-writes: a `lock` prefix, or xchg with memory) that
# the program's own code executed in profile FILE (made with --dump-instr=yes), per UNITS:
# each costs some 20 cycles beyond its count, as it waits for the stores before it. Their
# addresses come from objdump, their execution counts from the profile's per-instruction
# records (positions: absolute 0x..., relative +n / -n, or * for the same).
locked() {
    command -v objdump >/dev/null || { echo "n/a (objdump missing)"; return; }
    [ -s "$out/locked.addrs" ] || objdump -d --no-show-raw-insn "$bin" |
        awk '$2 == "lock" || ($2 == "xchg" && $3 ~ /\(/) { a = $1; sub(/:$/, "", a); print a }' \
            >"$out/locked.addrs"
    awk -v units="$2" -v binary="$(basename "$bin")" '
        function hex(h,   i, c, v) {
            v = 0; h = tolower(h); sub(/^0x/, "", h)
            for (i = 1; i <= length(h); i++) { c = index("0123456789abcdef", substr(h, i, 1)) - 1; v = v * 16 + c }
            return v
        }
        FNR == NR { want[hex($1)] = 1; next }
        /^c?ob=\([0-9]+\) / { id = $1; sub(/^c?ob=/, "", id); name[id] = $2 }
        /^ob=/ { id = $1; sub(/^ob=/, "", id); n = name[id]; ours = substr(n, length(n) - length(binary) + 1) == binary }
        /^[0-9+*-]/ {
            p = $1
            if (p ~ /^0x/) pos = hex(p); else if (p ~ /^\+/) pos += substr(p, 2); else if (p ~ /^-/) pos -= substr(p, 2)
            if (after_call) { after_call = 0; next }
            if (ours && (pos in want)) total += $3
        }
        /^calls=/ { after_call = 1 }
        END { if (units > 0) printf "%.1f", total / units; else print "n/a" }' "$out/locked.addrs" "$1"
}
# Inclusive instructions per call: the report's line with PATTERN over the calls of NAME.
per_call() {
    local all n
    all=$(inclusive "$1" "$2")
    n=$(calls "$1" "$3")
    awk -v a="$all" -v n="$n" 'BEGIN { if (a == "n/a" || n == 0) print "n/a"; else printf "%.0f (%d calls)", a / n, n }'
}

echo "$bin, callgrind: inclusive instructions per call (symbols needed: an unstripped build)"
echo
echo "| path | instructions |"
echo "|---|---|"
lat="SEND 8 B ping-pong over UDP (\`send_lat --loopback -s 8 -n $N -t 128\`)"
bw="WRITE 64 B in-process (\`write_bw --loopback --link inproc -s 64 -n $M\`)"
# A post call of profile FILE: NAME (post_send, post_recv) through the QP's bound calls
# (`QpDataPath`), or by QP number (`VerbsContext`) in a build from before them.
post_call() {
    local r
    r=$(per_call "$1" "QpDataPath>::$2 [" "QpDataPath>::$2")
    [ "$r" = n/a ] && r=$(per_call "$1" "VerbsContext>::$2 [" "VerbsContext>::$2")
    echo "$r"
}
receive='Device>::receive'
echo "| $lat: \`post_send\` | $(post_call "$out/lat" post_send) |"
echo "| the same: \`post_recv\` | $(post_call "$out/lat" post_recv) |"
echo "| the same: a datagram's receive (\`Device::receive\`) | $(per_call "$out/lat" "$receive [" "$receive") |"
echo "| the same: locked instructions (atomic read-modify-writes) per message in those three calls | $(locked "$out/locked" $((2 * N))) |"
echo "| an empty poll of the CQ (\`send_lat ... --baseline\` after its ping-pong) | $(per_call "$out/empty" "CqDataPath>::poll [" "CqDataPath>::poll") |"
echo "| the same: locked instructions per empty poll | $(locked "$out/empty" "$(calls "$out/empty" "CqDataPath>::poll")") |"
echo "| $bw: \`post_send\` | $(post_call "$out/bw" post_send) |"
echo "| the same: a datagram's receive | $(per_call "$out/bw" "$receive [" "$receive") |"
