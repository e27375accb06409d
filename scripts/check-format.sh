#!/usr/bin/env bash
# Fails when a C++ file differs from .clang-format (Google-based, 100 columns), and
# names each one; `git ls-files '*.cpp' '*.hpp' | xargs clang-format -i` fixes them.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cpp' '*.hpp')
if [ ${#bad[@]} -gt 0 ]; then
  printf 'format: differs from .clang-format: %s\n' "${bad[@]}"
  echo "format: 0 passed, 1 failed"
  exit 1
fi
echo "format: every C++ file matches .clang-format"
