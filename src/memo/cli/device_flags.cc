#include "memo/cli/device_flags.h"

#include "memo/backend/bf16_storage.h"
#include "memo/core/error.h"
#include "memo/kernels/cpu/cpu_backend.h"
#if MEMO_HAVE_CUDA
#include "memo/cuda/cuda_backend.h"
#endif

namespace memo::cli {

void add_device_flags(CLI::App& cmd, DeviceFlags& flags) {
  cmd.add_option("--device", flags.device, "Where the model runs: cpu, or cuda (GPU 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--precision", flags.precision,
                 "fp32, or bf16: bf16 weights and activations, f32 master weights, gradients, "
                 "optimiser state, statistics and loss (native bf16 kernels on cuda; by "
                 "conversion to f32 on the CPU). Default: bf16 on cuda, fp32 on the CPU")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

namespace {

std::unique_ptr<Backend> make_device(const DeviceFlags& f) {
  if (f.device == "cpu") return nullptr;
#if MEMO_HAVE_CUDA
  return make_cuda_backend(-1);
#else
  throw ConfigError(
      "--device cuda: this memo was built without the CUDA backend (no CUDA toolkit was found, "
      "or -DMEMO_CUDA=OFF)");
#endif
}

}  // namespace

DeviceChoice::DeviceChoice(const DeviceFlags& flags)
    : device_owned_(make_device(flags)),
      device_(device_owned_ ? device_owned_.get() : &cpu_backend()) {
  const std::string precision =
      flags.precision.empty() ? default_precision(flags.device) : flags.precision;
  if (precision == "bf16") bf16_ = std::make_unique<Bf16StorageBackend>(*device_);
  backend_ = bf16_ ? bf16_.get() : device_;
}

}  // namespace memo::cli
