// The composition root: --device, --precision and --nccl with the launcher (mpirun or not) make
// the one Runtime a command runs on (train/runtime.h): the backend, the GPU it runs on, bf16
// storage over it, the job's processes and what their collectives go over. No other code picks
// a device; a new backend or communicator plugs in here.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <memory>
#include <string>

#include "memo/mpi/mpi_communicator.h"
#include "memo/train/runtime.h"

namespace memo::cli {

struct RuntimeFlags {
  std::string device = "cpu";
  std::string precision;  // fp32 or bf16; unset: the device's default (default_precision)
  bool nccl = false;      // --device cuda: NCCL even for one process
};
// --device and --precision; with_nccl: --nccl too (the commands whose job reduces: train).
void add_runtime_flags(CLI::App& cmd, RuntimeFlags& flags, bool with_nccl = false);
// A run's precision where --precision is not given: bf16 mixed precision on cuda (the tensor
// cores' format), fp32 on the CPU (whose kernels are f32; bf16 there is storage by conversion).
std::string default_precision(const std::string& device);
Precision resolve_precision(const RuntimeFlags& flags);

// "cpu": the process's CPU backend; "cuda": the CUDA backend on this process's GPU (local_gpu:
// its node-local rank under MPI, else GPU 0), with NCCL over `world` between GPUs (or with
// --nccl alone). world: the MPI job of a command that runs as one (train under mpirun), null for
// one process. Throws ConfigError with the reason where this build has no CUDA, no GPU can be
// used, or a flag does not fit the device.
std::unique_ptr<Runtime> make_runtime(const RuntimeFlags& flags, MpiCommunicator* world,
                                      std::ostream& out);

}  // namespace memo::cli
