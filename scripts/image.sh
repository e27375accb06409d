#!/usr/bin/env bash
# Builds the container image with podman, offline, from Debian's packages only.
#   scripts/image.sh [TAG]     builds idemproxy:TAG (default: dev) from source, prints
#                              its size, and writes the package it installs to
#                              $IDEMPROXY_DEB_DIR/idemproxy_VERSION_amd64.deb (build/)
#   scripts/image.sh --base    only makes the Debian base (below), once
# By default the binary is compiled in the Dockerfile's build stage, as
# `podman build -f docker/Dockerfile .` does. With IDEMPROXY_IMAGE_FROM=build it is the
# Release build in build/ instead (scripts/build.sh, same Debian release), packaged by
# CPack there and installed by the Dockerfile's "prebuilt" stage: the test command
# uses that for the image most tests run, so that it compiles idemproxy once there.
# The Dockerfile starts FROM debian:bookworm-slim. No registry is reachable here, so
# that base is made once with mmdebstrap (minbase) and imported under that name; it
# stays in podman's store for later builds, and plain `podman build` finds it there.
# Layers are cached the same way, and the build stage's ccache in a cache mount, or,
# with IDEMPROXY_IMAGE_CCACHE=DIR, in the host's ccache directory DIR, mounted in with
# the host's locale: an object compiled the same way on the host (the same sources,
# flags and system headers: the same package versions) is then not compiled again.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=docker.io/library/debian:bookworm-slim
# The flags every podman call here needs (no systemd, no registry, small limits).
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1000:1000 --network host)

bash scripts/install-deps.sh image >/dev/null

make_base() {
  if "${PODMAN[@]}" image exists "$BASE"; then return; fi
  echo "image: making the $BASE base with mmdebstrap (once)"
  local tmp
  tmp=$(mktemp -d)
  # As Debian's own slim images do, leave out documentation, man pages and
  # translations (copyright files stay); later installs in the image follow suit.
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    bookworm "$tmp/rootfs.tar"
  "${PODMAN[@]}" import --quiet "$tmp/rootfs.tar" "$BASE" >/dev/null
  rm -rf "$tmp"
}
make_base
if [ "${1:-}" = --base ]; then exit 0; fi

TAG=${1:-dev}
DEB_DIR=${IDEMPROXY_DEB_DIR:-build}
version=$(sed -n 's/^project(idemproxy VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
revision=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
from=${IDEMPROXY_IMAGE_FROM:-source}
echo "image: building idemproxy:$TAG ($version, $revision) from $from"
started=$(date +%s)
mkdir -p "$DEB_DIR"
deb="$DEB_DIR/idemproxy_${version}_amd64.deb"
args=(--pull=never "${LIMITS[@]}" -f docker/Dockerfile --build-arg IDEMPROXY_VERSION="$version"
  --build-arg IDEMPROXY_REVISION="$revision")
if [ "$from" = build ]; then
  # Configuring again refreshes the revision --version reports (git describe); only
  # the executable's own sources recompile when it changed.
  cmake -S . -B build >/dev/null
  cmake --build build -j2 --target idemproxy >/dev/null
  rm -f build/idemproxy_*_amd64.deb
  (cd build && cpack -G DEB >/dev/null)
  mkdir -p .image
  cp "build/idemproxy_${version}_amd64.deb" .image/idemproxy.deb
  if [ "$DEB_DIR" != build ]; then cp .image/idemproxy.deb "$deb"; fi
  "${PODMAN[@]}" build --quiet "${args[@]}" --target prebuilt -t "idemproxy:$TAG" . >/dev/null
  rm -rf .image
else
  # IDEMPROXY_IMAGE_CCACHE: a ccache directory of the host's that the build stage uses
  # instead of its cache mount (docker/Dockerfile).
  if [ -n "${IDEMPROXY_IMAGE_CCACHE:-}" ]; then
    locale=""
    for v in LANG LC_ALL LC_CTYPE LC_MESSAGES; do locale+=" $v=${!v:-}"; done
    args+=(--volume "$IDEMPROXY_IMAGE_CCACHE:/host-ccache" --build-arg IDEMPROXY_CCACHE_DIR=/host-ccache
      --build-arg IDEMPROXY_LOCALE="$locale")
  fi
  # The build stage first, tagged, so the .deb can be copied out of it; the full build
  # then finds that stage in the layer cache.
  "${PODMAN[@]}" build --quiet "${args[@]}" --target build -t "idemproxy-build:$TAG" . >/dev/null
  "${PODMAN[@]}" build --quiet "${args[@]}" -t "idemproxy:$TAG" . >/dev/null
  ctr=$("${PODMAN[@]}" create "idemproxy-build:$TAG" true)
  "${PODMAN[@]}" cp "$ctr:/idemproxy.deb" "$deb"
  "${PODMAN[@]}" rm "$ctr" >/dev/null
fi
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "idemproxy:$TAG")
base_size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$BASE")
echo "image: idemproxy:$TAG built from $from in $(($(date +%s) - started)) s;" \
  "size $((size / 1048576)) MiB (its Debian base alone: $((base_size / 1048576)) MiB);" \
  "package $deb"
