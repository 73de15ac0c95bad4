#!/usr/bin/env bash
# Checks that every C++ file of the repository is formatted by the repository's .clang-format
# (Debian 12's clang-format 14). Prints the files that are not and exits non-zero; with --fix,
# formats them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "memo: ${#bad[@]} file(s) not formatted by .clang-format (scripts/check-format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "memo: format: ${#files[@]} files formatted by .clang-format"
