#!/usr/bin/env bash
# The second command of the README: install what the tests need (PyTorch for the reference
# checks, clang-format), check the formatting, build with warnings as errors, run every test with
# CTest, then the sanitizer runs (scripts/sanitize.sh: the suite but its longest runs under
# AddressSanitizer + UndefinedBehaviorSanitizer, the threaded parts under ThreadSanitizer). MEMO_SKIP_SANITIZERS=1
# leaves those out for a quick local run; CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenBLAS comes in only through CBC's LAPACK (memo's products run on oneDNN, scripts/build.sh's
# default), and its pthread build starts a worker per core in every process that spins on
# sched_yield before it sleeps: in each of the suite's thousands of test and memo processes, 0.14
# of the 0.44 CPU seconds of a test's start under AddressSanitizer (2-core EPYC, 2026-12-06).
export OPENBLAS_NUM_THREADS=1
scripts/install-deps.sh --test
scripts/check-format.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")
if [[ "${MEMO_SKIP_SANITIZERS:-0}" != 1 ]]; then scripts/sanitize.sh; fi
