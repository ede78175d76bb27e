#!/usr/bin/env bash
# Make a base image without a registry: this machine's node binary and the shared libraries that
# ldd lists for it and for the given native modules, a node user (1000:1000) and /tmp, imported
# into podman as IMAGE. Use it as `--build-arg BASE=IMAGE --pull=never`; elsewhere the
# Containerfile's default BASE (node:26-slim) serves. Usage: build-local-base.sh IMAGE [ELF...]
set -euo pipefail
image=${1:?usage: build-local-base.sh IMAGE [ELF...]}
shift
node=$(readlink -f "$(command -v node)")
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT

mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/home/node"
# Keep the host's merged-/usr links (/lib -> usr/lib, ...) so library paths resolve as they do here.
for top in lib lib64 lib32 libx32; do
  if [ -L "/$top" ]; then
    mkdir -p "$rootfs/$(readlink "/$top")"
    ln -s "$(readlink "/$top")" "$rootfs/$top"
  fi
done
cp "$node" "$rootfs/usr/local/bin/node"
for elf in "$node" "$@"; do
  # Lines look like "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
  ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r lib; do
  case "$lib" in */node_modules/*) continue ;; esac
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnode:x:1000:1000::/home/node:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnode:x:1000:\n' >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
chown 1000:1000 "$rootfs/home/node"

tar -C "$rootfs" -c . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["node"]' --quiet - "$image" >/dev/null
echo "build-local-base: $image with node $("$node" --version) ($(du -sh "$rootfs" | cut -f1))"
