#!/usr/bin/env bash
# The second command of the README: install what the tests need (PyTorch for the reference
# checks, clang-format), check the formatting, build with warnings as errors, run every test with
# CTest, then the sanitizer runs (scripts/sanitize.sh: the suite but its longest runs under
# AddressSanitizer + UndefinedBehaviorSanitizer, the threaded parts under ThreadSanitizer). MEMO_SKIP_SANITIZERS=1
# leaves those out for a quick local run; CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/check-format.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")
if [[ "${MEMO_SKIP_SANITIZERS:-0}" != 1 ]]; then scripts/sanitize.sh; fi
