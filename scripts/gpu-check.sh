#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one call on a lent GPU machine (the device tool runs it in
# the repository root of a copy of the working tree). Build here first and carry the outputs:
#   scripts/gpu-check.sh prepare     (here: builds the GPU targets and copies the shared libraries
#                                     they need that a CUDA image may lack into build/gpu-libs)
#   then on the device: scripts/gpu-check.sh, carrying build/memo_nccl_check and build/gpu-libs
# Today it runs the NCCL communicator's check (tests/gpu/nccl_check.cc) on every GPU the machine
# has, one process per GPU under mpirun where mpirun exists, else one process on GPU 0. Output
# goes to stdout and, when $OUT is set, to $OUT/gpu-check.log. Nothing in it has run on a GPU yet.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "prepare" ]]; then
  set -e
  scripts/build.sh memo_nccl_check
  mkdir -p build/gpu-libs
  # Debian's libraries (Open MPI and what it pulls in, GoogleTest): not glibc, not CUDA's
  ldd build/memo_nccl_check | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]' |
    xargs -r cp -L -t build/gpu-libs
  echo "gpu-check: build/memo_nccl_check and $(ls build/gpu-libs | wc -l) libraries in build/gpu-libs: carry build"
  exit 0
fi
log=${OUT:-/tmp}/gpu-check.log
exec > >(tee "$log") 2>&1
echo "gpu-check: $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
[[ -x build/memo_nccl_check ]] || { echo "gpu-check: build/memo_nccl_check missing: run 'scripts/gpu-check.sh prepare' here and carry build"; exit 1; }
export LD_LIBRARY_PATH="$PWD/build/gpu-libs:${LD_LIBRARY_PATH:-}"
if ldd build/memo_nccl_check | grep -q "not found"; then
  echo "gpu-check: libraries missing:"; ldd build/memo_nccl_check | grep "not found"; exit 1
fi
status=0
if command -v mpirun >/dev/null && ((gpus > 1)); then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 \
    mpirun --oversubscribe --bind-to none -np "$gpus" build/memo_nccl_check || status=$?
else
  timeout 300 build/memo_nccl_check || status=$?
fi
echo "gpu-check: nccl_check exit $status ($gpus GPUs)"
exit $status
