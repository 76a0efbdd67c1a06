#!/usr/bin/env bash
# softverbs against the kernel's rxe on the same machine: both run inside the rxe lab's VM
# (qemu TCG, 2 vCPUs, Debian 12's kernel and perftest), which is the only place this
# project's machines can load rdma_rxe. Each row alternates the two, REPEAT times, and
# prints the medians:
#   - rxe: perftest (ib_write_bw, ib_send_lat) with both ends on rxe0, which rxe loops back
#     inside the kernel;
#   - softverbs over UDP: `softverbs perf --loopback` on two devices on 127.0.0.1/.2 (on
#     ports other than 4791, which the guest's rxe holds);
#   - softverbs in-process: the same over the in-process link (no sockets, like rxe's
#     loopback).
# Emulation makes every system call and interrupt far dearer than on hardware, so the
# figures compare the two stacks on one machine, not either with the host.
#
#   softverbs rxe-lab up && tools/bench/vs-rxe.sh    # about two minutes
#
# Traffic stays inside the VM (its loopback and rxe0's own address).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEAT=${REPEAT:-3}
LAB=tools/rxe-lab/lab.sh
bash "$LAB" status >/dev/null || { echo "vs-rxe: the lab is not up (softverbs rxe-lab up)" >&2; exit 1; }
cargo build --release -q -p softverbs-tools
guest() { bash "$LAB" ssh "$@"; }
guest 'cat > /root/softverbs && chmod +x /root/softverbs' <target/release/softverbs
eval "$(bash "$LAB" env)"
rxe_ip=${SOFTVERBS_LAB_GUEST_IP:-10.77.0.2}

# A value of a report line: `field N of the line starting with SIZE`.
field() { awk -v size="$1" -v n="$2" '$1 == size { print $n; exit }'; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# perftest with both ends on rxe0: the server in the background, then the client.
rxe() {
  guest "(timeout 120 $1 -d rxe0 -x 1 >/dev/null 2>&1 &); sleep 1; timeout 120 $1 -d rxe0 -x 1 $rxe_ip"
}
sv() {
  guest "SOFTVERBS_DEVICES=a=127.0.0.1:14791,b=127.0.0.2:14791 timeout 120 /root/softverbs perf $1"
}

declare -A got
for _ in $(seq "$REPEAT"); do
  got[bw_rxe]+="$(rxe 'ib_write_bw -s 65536 -n 2000' | field 65536 4) "
  got[bw_udp]+="$(sv 'write_bw --loopback -s 65536 -n 2000' | field 65536 4) "
  got[bw_inproc]+="$(sv 'write_bw --loopback --link inproc -s 65536 -n 2000' | field 65536 4) "
  got[lat_rxe]+="$(rxe 'ib_send_lat -s 8 -n 2000' | field 8 5) "
  got[lat_udp]+="$(sv 'send_lat --loopback -s 8 -n 2000' | field 8 4) "
  got[lat_inproc]+="$(sv 'send_lat --loopback --link inproc -s 8 -n 2000' | field 8 4) "
done
m() { tr ' ' '\n' <<<"${got[$1]}" | grep . | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "Inside the rxe lab VM ($(guest 'uname -r'), $(guest nproc) vCPUs, qemu TCG); medians of $REPEAT alternating runs."
echo
echo "| benchmark | kernel rxe (perftest, rxe0 loopback) | softverbs, UDP loopback | softverbs, in-process link |"
echo "|---|---|---|---|"
printf '| WRITE 64 KiB, average MB/s (higher is better) | %s | %s (%sx rxe) | %s (%sx rxe) |\n' \
  "$(m bw_rxe)" "$(m bw_udp)" "$(ratio "$(m bw_udp)" "$(m bw_rxe)")" \
  "$(m bw_inproc)" "$(ratio "$(m bw_inproc)" "$(m bw_rxe)")"
printf '| SEND 8 B latency, median half RTT us (lower is better) | %s | %s (%sx rxe) | %s (%sx rxe) |\n' \
  "$(m lat_rxe)" "$(m lat_udp)" "$(ratio "$(m lat_udp)" "$(m lat_rxe)")" \
  "$(m lat_inproc)" "$(ratio "$(m lat_inproc)" "$(m lat_rxe)")"
