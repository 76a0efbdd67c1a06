#!/usr/bin/env bash
# The rxe interop lab: a Debian 12 VM under qemu (TCG) whose kernel rxe device faces
# softverbs over a qemu socket netdev (Ethernet frames as UDP datagrams on 127.0.0.1).
#
#   lab.sh build    build the guest image unless the cached one matches the recipe
#   lab.sh up       boot the VM, load rdma_rxe, create rxe0 on the lab NIC
#   lab.sh down     stop the VM (also after failures) and remove the run state
#   lab.sh status   say whether a lab is up
#   lab.sh ssh CMD  run CMD in the guest
#   lab.sh env      print the lab's settings as shell assignments
#
# Topology (docs/rxe-lab.md): every host-side socket is on 127.0.0.1; the lab addresses
# (10.77.0.0/24 by default) exist only inside the guest and inside the softverbs process.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

cache_root=${SOFTVERBS_LAB_CACHE:-/var/cache/softverbs/rxe-lab}
run_dir=${SOFTVERBS_LAB_RUN:-$cache_root/run}
port_base=${SOFTVERBS_LAB_PORT_BASE:-47900}
link_port=$((port_base + 1))  # softverbs' end of the lab link
qemu_port=$((port_base + 2))  # qemu's end of the lab link
ssh_port=$((port_base + 22))  # hostfwd to the guest's sshd
lab_net=${SOFTVERBS_LAB_NET:-10.77.0}
host_ip=$lab_net.1            # softverbs' lab address
guest_ip=$lab_net.2           # the guest rxe's lab address
lab_mtu=${SOFTVERBS_LAB_MTU:-9000}
vm_mem_mib=${SOFTVERBS_LAB_MEM_MIB:-1024}
# Two vCPUs: with one, a perftest latency program busy-polling its buffer starves the guest
# rxe's deferred requester work (write_lat's -a sweep at MTU 4096 stalled mid-WRITE in 3 runs
# of 5 on one vCPU, and passed 6 of 6 on two).
vm_cpus=${SOFTVERBS_LAB_CPUS:-2}
boot_timeout_s=${SOFTVERBS_LAB_BOOT_TIMEOUT:-240}

die() { echo "rxe-lab: $*" >&2; exit 1; }

recipe_hash() {
    (cd "$here/image" && sha256sum $(ls | sort)) | sha256sum | cut -c1-16
}
image_dir() { echo "$cache_root/$(recipe_hash)"; }

# The Debian mirror apt uses on this host (deb822 or one-line sources), unless overridden.
host_mirror() {
    if [ -n "${SOFTVERBS_LAB_MIRROR:-}" ]; then echo "$SOFTVERBS_LAB_MIRROR"; return; fi
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1 || true)
    [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        awk '{print $2}' | grep -v security | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

cmd_build() {
    local dir
    dir=$(image_dir)
    if [ -f "$dir/rootfs.img" ]; then
        echo "rxe-lab: image $dir is up to date"
        return
    fi
    [ "$(id -u)" = 0 ] || die "building the image needs root (debootstrap)"
    for tool in debootstrap mkfs.ext4 ssh-keygen; do
        command -v "$tool" >/dev/null || die "$tool not found (apt-get install debootstrap e2fsprogs openssh-client)"
    done
    # Proxy settings of apt, if any, serve debootstrap too.
    local proxy
    proxy=$(apt-config dump 2>/dev/null | sed -n 's/^Acquire::http::Proxy "\(.*\)";/\1/p' | head -n1 || true)
    if [ -n "$proxy" ] && [ -z "${http_proxy:-}" ]; then export http_proxy=$proxy; fi
    local tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$cache_root"
    trap 'rm -rf "$tmp"' EXIT
    local started=$SECONDS
    echo "rxe-lab: building $dir from $(host_mirror)"
    "$here/image/build-image.sh" "$tmp" "$(host_mirror)" > "$cache_root/build.log" 2>&1 ||
        { tail -n 30 "$cache_root/build.log" >&2; die "image build failed (log: $cache_root/build.log)"; }
    mv "$tmp" "$dir"
    trap - EXIT
    # Images of older recipes are dead weight (about 1 GB each).
    for old in "$cache_root"/*; do
        case "${old##*/}" in
            "${dir##*/}") ;;
            [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])
                rm -rf "$old" ;;
        esac
    done
    echo "rxe-lab: built in $((SECONDS - started)) s: $(tr '\n' ';' < "$dir/versions")"
}

ssh_opts() {
    echo "-i $(image_dir)/lab_key -p $ssh_port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=10"
}
guest() {
    # shellcheck disable=SC2046
    ssh $(ssh_opts) root@127.0.0.1 "$@"
}

qemu_pid() {
    local pid
    pid=$(cat "$run_dir/qemu.pid" 2>/dev/null) || return 1
    # Only our qemu: the pid file may be stale and the number reused.
    grep -qa softverbs-rxe-lab "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

cmd_status() {
    if pid=$(qemu_pid); then
        echo "rxe-lab: up (qemu pid $pid, run dir $run_dir)"
    else
        echo "rxe-lab: down"
        return 1
    fi
}

cmd_down() {
    local pid
    if pid=$(qemu_pid); then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        echo "rxe-lab: stopped qemu (pid $pid)"
    fi
    rm -f "$run_dir/qemu.pid" "$run_dir/qmp.sock" "$run_dir/lab.env"
}

cmd_up() {
    local dir
    dir=$(image_dir)
    [ -f "$dir/rootfs.img" ] || die "no image for this recipe: run build first"
    command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
    if qemu_pid >/dev/null; then die "a lab is already up (run down first)"; fi
    mkdir -p "$run_dir"
    rm -f "$run_dir/console.log"
    # A failed boot leaves nothing running (die exits, so EXIT, not ERR).
    trap 'cmd_down >/dev/null 2>&1 || true' EXIT
    local started=$SECONDS
    # -accel tcg: this host's paravirtual KVM does not boot a stock Debian kernel.
    qemu-system-x86_64 -name softverbs-rxe-lab -accel tcg -machine q35 -cpu max \
        -m "$vm_mem_mib" -smp "$vm_cpus" \
        -display none -serial "file:$run_dir/console.log" \
        -qmp "unix:$run_dir/qmp.sock,server=on,wait=off" \
        -kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" \
        -append "console=ttyS0 root=/dev/vda rw init=/sbin/lab-init net.ifnames=0 panic=-1 lab_ip=$guest_ip/24 lab_mtu=$lab_mtu" \
        -drive "file=$dir/rootfs.img,if=virtio,format=raw,snapshot=on" \
        -netdev "user,id=ctl,net=10.0.2.0/24,restrict=on,hostfwd=tcp:127.0.0.1:$ssh_port-:22" \
        -device virtio-net-pci,netdev=ctl,mac=52:54:00:00:00:0c \
        -netdev "socket,id=lab,udp=127.0.0.1:$link_port,localaddr=127.0.0.1:$qemu_port" \
        -device virtio-net-pci,netdev=lab,mac=52:54:00:77:00:02 \
        -daemonize -pidfile "$run_dir/qemu.pid"
    local deadline=$((SECONDS + boot_timeout_s))
    until grep -q "rxe-lab: guest ready" "$run_dir/console.log" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { tail -n 20 "$run_dir/console.log" >&2; die "guest not ready after ${boot_timeout_s} s"; }
        qemu_pid >/dev/null || { tail -n 20 "$run_dir/console.log" >&2; die "qemu exited during boot"; }
        sleep 1
    done
    local booted=$((SECONDS - started))
    until guest true 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || die "no ssh into the guest after ${boot_timeout_s} s"
        sleep 1
    done
    guest "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev lab0 && rdma link show rxe0/1" >/dev/null ||
        die "could not create rxe0 in the guest"
    {
        echo "kernel=$(guest uname -r)"
        echo "rdma_core=$(guest "dpkg-query -W -f='\${Version}' rdma-core")"
        echo "perftest=$(guest "dpkg-query -W -f='\${Version}' perftest")"
    } > "$run_dir/versions"
    cat > "$run_dir/lab.env" <<ENV
SOFTVERBS_LAB_HOST_IP=$host_ip
SOFTVERBS_LAB_GUEST_IP=$guest_ip
SOFTVERBS_LAB_LINK=127.0.0.1:$link_port/127.0.0.1:$qemu_port
SOFTVERBS_LAB_MTU=$lab_mtu
SOFTVERBS_LAB_SSH_PORT=$ssh_port
SOFTVERBS_LAB_SSH_KEY=$dir/lab_key
SOFTVERBS_LAB_QMP=$run_dir/qmp.sock
SOFTVERBS_LAB_RUN=$run_dir
ENV
    trap - EXIT
    echo "rxe-lab: up in $((SECONDS - started)) s (guest ready after $booted s): $(tr '\n' ' ' < "$run_dir/versions")"
}

cmd_env() {
    [ -f "$run_dir/lab.env" ] || die "no lab is up"
    cat "$run_dir/lab.env"
}

case "${1:-}" in
    build) cmd_build ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    ssh) shift; guest "$@" ;;
    hash) recipe_hash ;;
    *) die "usage: lab.sh build|up|down|status|env|ssh CMD" ;;
esac
