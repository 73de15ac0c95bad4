#include "memo/cli/device_flags.h"

#include "memo/core/error.h"
#include "memo/kernels/cpu/cpu_backend.h"
#if MEMO_HAVE_CUDA
#include "memo/cuda/cuda_backend.h"
#endif

namespace memo::cli {

void add_device_flags(CLI::App& cmd, DeviceFlags& flags) {
  cmd.add_option("--device", flags.device,
                 "Where the model runs: cpu, or cuda (GPU 0; fp32 only so far)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--precision", flags.precision,
                 "Weights and activations: fp32 (bf16 is not implemented yet)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
}

namespace {

std::unique_ptr<Backend> make_backend(const DeviceFlags& f) {
  if (f.precision != "fp32")
    throw ConfigError(str("--precision ", f.precision, ": only fp32 is implemented (bf16 on ",
                          "CUDA is issue #10's next step)"));
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
    : owned_(make_backend(flags)), backend_(owned_ ? owned_.get() : &cpu_backend()) {}

}  // namespace memo::cli
