#!/usr/bin/env bash
# Makes this machine able to build and run hvdlite's images with podman when no Docker engine runs and no container
# registry can be reached (as on hvdlite's CI machines): podman and runc from Debian; runc as the runtime (crun fails
# on some cgroup layouts); default ulimits no higher than this machine's hard limit (raising it may be refused);
# and debian:bookworm-slim made locally with debootstrap, holding this machine's CA bundle (HTTPS to the package
# index may pass a proxy that re-signs certificates), so that FROM needs no pull. Idempotent (HVDLITE_REMAKE_BASE=1
# makes the base image again); needs root.
set -euo pipefail
base=debian:bookworm-slim
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" uidmap >/dev/null
fi

mkdir -p /etc/containers
# The runtime's own process may run with a lower process limit than this shell (32768 seen), so nproc stays at or
# under that too.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
cat > /etc/containers/containers.conf <<CONF
# Written by hvdlite's docker/setup-podman.sh.
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONF
# No registry is consulted: short names resolve to what is stored locally.
if [ ! -f /etc/containers/registries.conf.d/hvdlite.conf ]; then
  mkdir -p /etc/containers/registries.conf.d
  echo 'short-name-mode = "disabled"' > /etc/containers/registries.conf.d/hvdlite.conf
fi

if podman image exists "$base" && [ -z "${HVDLITE_REMAKE_BASE:-}" ]; then
  echo "setup-podman: $base is already there"
  exit 0
fi
rootfs=$(mktemp -d /var/tmp/hvdlite-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "setup-podman: debootstrap bookworm (minbase) from $mirror"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
ca=/etc/ssl/certs/ca-certificates.crt
if [ -f "$ca" ]; then
  # Both where pip is pointed (PIP_CERT) and where update-ca-certificates, run when a build installs Debian's
  # ca-certificates, takes local certificates from, so that installing it keeps them.
  mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/usr/local/share/ca-certificates"
  cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  cp "$ca" "$rootfs/usr/local/share/ca-certificates/host-bundle.crt"
fi
# Like the published slim image: no apt lists or caches, no documentation.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$base" >/dev/null
echo "setup-podman: imported $base ($(podman image inspect --format '{{.Size}}' "$base") bytes)"
