#!/usr/bin/env bash
# Configures and builds idemproxy (Release by default) into build/.
#   BUILD_DIR (build), BUILD_TYPE (Release): where and what
#   BUILD_TARGETS="idemproxy ...": only these targets (default: all, tests included)
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
echo "build: $BUILD_DIR ($BUILD_TYPE${*:+, $*}${BUILD_TARGETS:+; only $BUILD_TARGETS})"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j2 "${targets[@]}"
