#!/usr/bin/env bash
# Configures and builds idemproxy (Release by default) into build/.
#   BUILD_DIR (build), BUILD_TYPE (Release): where and what
#   BUILD_TARGETS="idemproxy ...": only these targets (default: all, tests included)
#   PGO=1: the proxy optimised by a profile scripts/pgo.sh records first (GCC; the
#   proxy and its libraries, not the tests' own sources; cmake/pgo.cmake); PGO=0:
#   without one; unset: as the tree was configured (a new tree: without)
# A new build tree uses Ninja when it is installed (install-deps.sh installs it): it
# compiles one library's sources while the one below it is still compiling, where
# make waits for each library in turn (docs/BUILD.md). An existing tree keeps the
# generator it was made with; CMAKE_GENERATOR chooses another for a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
  export CMAKE_GENERATOR=Ninja
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
pgo=()
case "${PGO:-}" in
  1)
    args=$(BUILD_DIR=$BUILD_DIR BUILD_TYPE=$BUILD_TYPE bash scripts/pgo.sh "$@")
    read -r -a pgo <<<"$args"
    ;;
  0) pgo=(-DIDEMPROXY_PGO=) ;;
  "") ;;
  *) echo "build: PGO is 1 or 0, not '$PGO'" >&2; exit 2 ;;
esac
echo "build: $BUILD_DIR ($BUILD_TYPE${pgo[*]:+, ${pgo[*]}}${*:+, $*}${BUILD_TARGETS:+; only $BUILD_TARGETS})"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${pgo[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j2 "${targets[@]}"
