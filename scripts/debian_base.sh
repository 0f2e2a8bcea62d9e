#!/usr/bin/env bash
# A Debian 12 (bookworm) base image made from Debian's own packages, for machines that reach Debian's mirror but no
# container registry (`FROM debian:bookworm-slim` cannot be pulled there). debootstrap's minbase variant is essentially
# what debian:bookworm-slim holds (essential + apt); the image is imported into the engine's local storage.
# Usage: scripts/debian_base.sh [IMAGE] [ENGINE]      (default localhost/debian:bookworm, podman or docker)
# Then:  python -m bench images build --base IMAGE VARIANT...
set -euo pipefail
image=${1:-localhost/debian:bookworm}
engine=${2:-$(command -v podman >/dev/null && echo podman || echo docker)}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "debian_base.sh: debootstrap needs root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "debian_base.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
root=$(mktemp -d /tmp/bench-debian-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# What the slim images drop: apt's downloaded lists and packages (every Dockerfile runs apt-get update first).
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
  "$mirror" "$mirror" > "$root/etc/apt/sources.list"
tar -C "$root" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "$image"
