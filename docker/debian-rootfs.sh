#!/usr/bin/env bash
# A Debian root file system as a tarball, for `docker import` when no registry serves python:3.11-slim.
#
#   docker/debian-rootfs.sh OUT.tar
#
# debootstrap (minbase) of $DEBIAN_SUITE from $DEBIAN_MIRROR with Python 3 and what the images need:
# bookworm's python3 is 3.11 (3.11.2), the Python the project is pinned for (trixie's is 3.13).
# Written to OUT.tar.partial and renamed, so a cached tarball is always complete. Needs root.
set -euo pipefail

out=${1:?usage: debian-rootfs.sh OUT.tar}
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# python3-venv: `train` makes a venv for code/requirements.txt; python3-pip: pip in image builds;
# python-is-python3: `python` like in python:3.11-slim; tini: a PID 1 for images run without --init.
packages=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,tini,procps

[ "$(id -u)" = 0 ] || { echo "debian-rootfs: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || {
    apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap >/dev/null
}

work=$(mktemp -d /var/tmp/debian-rootfs.XXXXXX)
cleanup() {
    # debootstrap mounts /proc, /sys (and may bind /dev) in the chroot; never delete through a mount.
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
echo "debian-rootfs: debootstrap $suite ($mirror) with $packages; this takes a few minutes" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/log" 2>&1 || {
    tail -20 "$work/log" >&2
    exit 1
}
# Smaller and reproducible-ish: no apt lists or caches, no logs; record what is installed.
chroot "$work/root" dpkg-query -W -f '${Package}=${Version}\n' >"$work/packages.txt"
rm -rf "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/*.bin "$work/root"/var/cache/apt/archives/*.deb \
       "$work/root"/var/log/* "$work/root"/tmp/* "$work/root"/root/.cache
cp "$work/packages.txt" "$work/root/etc/training-base-packages.txt"
mkdir -p "$(dirname "$out")"
tar --numeric-owner -C "$work/root" -cf "$out.partial" .
mv "$out.partial" "$out"
cp "$work/packages.txt" "${out%.tar}.packages.txt"
echo "debian-rootfs: wrote $out ($(du -h "$out" | cut -f1), $(wc -l <"$work/packages.txt") packages)" >&2
