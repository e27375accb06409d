#!/usr/bin/env bash
# Installs, from Debian's packages, whatever idemproxy needs that is missing.
# Idempotent: does nothing (and needs no network) when everything is present.
#   scripts/install-deps.sh          what building, running and testing need
#   scripts/install-deps.sh bench    that, plus what bench/run.sh needs
#   scripts/install-deps.sh build    only what building and packaging (.deb) need,
#                                    as the container image's build stage uses it
#   scripts/install-deps.sh run      what scripts/run-local.sh needs: building, plus
#                                    PostgreSQL, Python and curl for the demo
#   scripts/install-deps.sh image    what building and running the image needs
#   scripts/install-deps.sh citus    what building Citus from ../shared/vendor needs
set -euo pipefail

BUILD_PACKAGES=(
  cmake ninja-build ccache g++ make pkg-config dpkg-dev file
  libboost1.81-dev libboost-url1.81-dev
  libpqxx-dev libpq-dev libssl-dev nlohmann-json3-dev libspdlog-dev libyaml-cpp-dev
  libnghttp2-dev libtcmalloc-minimal4
)
# Configuring the build tree looks for GoogleTest, so the first run needs it too.
RUN_PACKAGES=(
  "${BUILD_PACKAGES[@]}" libgtest-dev libgmock-dev postgresql-15 python3 curl
)
PACKAGES=(
  "${RUN_PACKAGES[@]}"
  clang libclang-rt-14-dev clang-format clang-tidy
  pgbouncer postgresql-15-auto-failover pg-auto-failover-cli
  python3-pytest python3-pytest-xdist python3-prometheus-client python3-yaml
  procps openssl
  # Real peers for the outside-in tests: nginx and Node's http as upstreams, Node's
  # fetch and curl as clients; faketime for a proxy whose clock is off; prlimit.
  nginx-light nodejs faketime util-linux
  # HTTP/2 peers: curl (above), h2load and nghttp, Python's h2 (hostile frames),
  # grpcio (a gRPC client and server).
  nghttp2-client python3-h2 python3-grpcio
  # Streaming clients: httpx (Python), besides curl -N, Node fetch and Chromium.
  python3-httpx
  # The operators' view: a real Prometheus (and promtool) for the dashboard and the
  # alert rules, and headless Chromium for the admin page (driven by puppeteer-core).
  prometheus chromium
)
case "${1:-}" in
  bench) PACKAGES+=(wrk haproxy) ;;
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  run) PACKAGES=("${RUN_PACKAGES[@]}") ;;
  # podman runs the image offline; mmdebstrap makes its Debian base (scripts/image.sh).
  image) PACKAGES+=(podman runc mmdebstrap uidmap) ;;
  # Citus builds from source against Debian's PostgreSQL 15 (scripts/citus.sh).
  citus)
    PACKAGES+=(postgresql-server-dev-15 liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev
      libxslt1-dev libpam0g-dev libreadline-dev)
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
