#!/usr/bin/env bash
# Builds the rxe lab guest image into OUT (a fresh directory): debootstrap Debian 12 with the
# packages of ./packages, this directory's lab-init as PID 1, a root ssh key for the lab, then
# the kernel + initrd extracted and the root file system packed into an ext4 image.
# Usage: build-image.sh OUT MIRROR. Needs root (debootstrap, chroot).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mirror=$2
suite=bookworm

root="$out/rootfs"
mkdir -p "$root"
pkgs=$(grep -v '^#' "$here/packages" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

# minbase: no systemd; lab-init is PID 1.
debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror"

install -m 0755 "$here/lab-init" "$root/sbin/lab-init"
echo rxelab > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 rxelab\n' > "$root/etc/hosts"
# Key-only root login over the control NIC (reachable only through qemu's hostfwd on
# 127.0.0.1).
ssh-keygen -q -t ed25519 -N '' -C rxe-lab -f "$out/lab_key"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$out/lab_key.pub" "$root/root/.ssh/authorized_keys"
# dropbear refuses accounts whose password field is locked with '!'.
sed -i 's/^root:[^:]*:/root:*:/' "$root/etc/shadow"

# Kernel and initrd for qemu's direct boot.
cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
cp "$root"/boot/initrd.img-* "$out/initrd.img"

{
    echo "kernel $(ls "$root/lib/modules")"
    chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' \
        rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils python3-pyverbs linux-image-amd64
} > "$out/versions"

# Docs, man pages and the apt cache are dead weight in the image.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/var/cache/apt/archives/*.deb
size_mib=$(( $(du -sm "$root" | cut -f1) + 256 ))
mkfs.ext4 -q -F -L rxelab -d "$root" "$out/rootfs.img" "${size_mib}M"
rm -rf "$root"
