#!/usr/bin/env bash
# A/B of two softverbs builds (say, a base commit's and a change's release binaries):
# N alternating rounds of WRITE 64 KiB bandwidth and SEND 8 B latency, each with its raw
# UDP baseline in the same command; prints each round and the medians per build.
# usage: tools/bench/ab.sh N BIN_A BIN_B
n=$1; A=$2; B=$3
set -u
out=$(mktemp); trap 'rm -f "$out"' EXIT
for i in $(seq $n); do
  for tag in A B; do
    bin=${!tag}
    w=$($bin perf write_bw --loopback -s 65536 -n 20000 --baseline --rounds 3 --json 2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["results"][0]["bw_avg_mbs"], d["results"][0]["ratio_to_udp"])')
    l=$($bin perf send_lat --loopback -s 8 -n 5000 --baseline --rounds 3 --json 2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["results"][0]["t_typical_us"], d["results"][0]["ratio_to_udp"])')
    echo "$tag $w $l" | tee -a $out
  done
done
python3 - $out <<'PY'
import sys, statistics as st
rows=[l.split() for l in open(sys.argv[1]) if len(l.split())==5]
for tag in "AB":
    r=[list(map(float,x[1:])) for x in rows if x[0]==tag]
    if not r: continue
    print(tag, "write_bw MB/s median %.0f, ratio to UDP %.2f; send_lat us median %.2f, ratio to UDP %.2f" % tuple(st.median(c) for c in zip(*r)))
PY
