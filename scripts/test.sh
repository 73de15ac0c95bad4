#!/usr/bin/env bash
# The second command of the README: install what the tests need (PyTorch for the reference
# checks), build, and run every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
