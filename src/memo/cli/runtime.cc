#include "memo/cli/runtime.h"

#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#if MEMO_HAVE_CUDA
#include "memo/cuda/cuda_backend.h"
#endif
#if MEMO_HAVE_NCCL
#include "memo/nccl/nccl_communicator.h"
#endif

namespace memo::cli {

void add_runtime_flags(CLI::App& cmd, RuntimeFlags& flags, bool with_nccl) {
  cmd.add_option("--device", flags.device,
                 "Where the model runs: cpu, or cuda (this process's GPU: its node-local rank "
                 "under mpirun, else GPU 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  // eval and generate hold no optimiser; train alone resumes
  const bool trains = cmd.get_name() != "eval" && cmd.get_name() != "generate";
  cmd.add_option("--precision", flags.precision,
                 str("fp32, or bf16: bf16 weights and activations, f32 ",
                     trains ? "master weights, gradients, optimiser state, " : "",
                     "statistics and loss (native bf16 kernels on cuda; by conversion to f32 on "
                     "the CPU). Default: bf16 on cuda, fp32 on the CPU",
                     cmd.get_name() == "train" ? "; with --resume: the run's" : ""))
      ->check(CLI::IsMember({"fp32", "bf16"}));
  if (with_nccl)
    cmd.add_flag("--nccl", flags.nccl,
                 "--device cuda: reduce over NCCL even without mpirun (a group of one GPU; "
                 "under mpirun --device cuda always does)");
}

std::string default_precision(const std::string& device) {
  return device == "cuda" ? "bf16" : "fp32";
}

Precision resolve_precision(const RuntimeFlags& flags) {
  const std::string p = flags.precision.empty() ? default_precision(flags.device) : flags.precision;
  return p == "bf16" ? Precision::kBf16 : Precision::kFp32;
}

namespace {

#if MEMO_HAVE_CUDA
// Between GPUs the job's collectives go over NCCL (device buffers), bootstrapped over the MPI
// world, its stream ordered after the backend's compute stream; null where they stay as they are
// (one process without --nccl).
std::unique_ptr<Communicator> gpu_collectives(Backend& gpu, MpiCommunicator* world, bool nccl) {
  if (!world && !nccl) return nullptr;
#if MEMO_HAVE_NCCL
  std::unique_ptr<NcclCommunicator> c = world ? NcclCommunicator::over(*world, cuda_device(gpu))
                                              : NcclCommunicator::single(cuda_device(gpu));
  c->follow(static_cast<cudaStream_t>(cuda_compute_stream(gpu)));
  return c;
#else
  throw ConfigError(
      "--device cuda with NCCL (under mpirun, or --nccl): this memo was built without NCCL");
#endif
}
#endif

}  // namespace

std::unique_ptr<Runtime> make_runtime(const RuntimeFlags& flags, MpiCommunicator* world,
                                      std::ostream& out) {
  const Precision precision = resolve_precision(flags);
  if (flags.device == "cpu") {
    if (flags.nccl) throw ConfigError("--nccl needs --device cuda");
    return std::make_unique<Runtime>(cpu_backend(), nullptr, precision, world, nullptr, out);
  }
#if MEMO_HAVE_CUDA
  std::unique_ptr<Backend> gpu = make_cuda_backend(local_gpu(world, cuda_device_count()));
  std::unique_ptr<Communicator> collectives = gpu_collectives(*gpu, world, flags.nccl);
  Backend& device = *gpu;
  return std::make_unique<Runtime>(device, std::move(gpu), precision, world, std::move(collectives),
                                   out);
#else
  throw ConfigError(
      "--device cuda: this memo was built without the CUDA backend (no CUDA toolkit was found, "
      "or -DMEMO_CUDA=OFF)");
#endif
}

}  // namespace memo::cli
