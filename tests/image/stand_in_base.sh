#!/usr/bin/env bash
# A local stand-in for the Dockerfile's base (python:3.11-slim), built from Debian packages
# only, for machines that reach Debian's mirrors but no container registry (docs/image.md).
#
#   tests/image/stand_in_base.sh IMAGE [SUITE]
#
# mmdebstrap makes a minimal Debian rootfs with Debian's python3 (3.11 in bookworm, the
# Dockerfile's minor version) and a venv at /opt/venv first on PATH, so the bare `python` and
# `pip` the Dockerfile calls exist; buildah turns the rootfs into an image. What differs from
# the real base: Python lives in /usr/bin + /opt/venv instead of /usr/local, it is Debian's
# build of 3.11 (not python.org's), and the package set is Debian's minbase plus python3.
# Nothing of the host goes in: the apt sources are passed to mmdebstrap, not copied.
set -euo pipefail
image=${1:?usage: stand_in_base.sh IMAGE [SUITE]}
suite=${2:-bookworm}
sources=/etc/apt/sources.list.d/debian.sources
[ -r "$sources" ] || sources=/etc/apt/sources.list
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --customize-hook='chroot "$1" python3 -m venv /opt/venv' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$suite" "$work/rootfs.tar" "$sources"

container=$(buildah from scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
buildah add --quiet "$container" "$work/rootfs.tar" /
buildah config \
  --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 \
  --cmd python3 \
  --label org.opencontainers.image.description="stand-in for python:3.11-slim (Debian $suite python3 + venv)" \
  "$container"
buildah commit --quiet --rm "$container" "$image" >/dev/null
trap 'rm -rf "$work"' EXIT
echo "$image"
