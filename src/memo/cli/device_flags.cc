#include "memo/cli/device_flags.h"

#include "memo/core/error.h"
#if MEMO_HAVE_CUDA
#include "memo/cuda/cuda_backend.h"
#endif

namespace memo::cli {

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& precision) {
  if (precision != "fp32")
    throw ConfigError(str("--precision ", precision, ": only fp32 is implemented (bf16 on CUDA is ",
                          "issue #10's next step)"));
  if (device == "cpu") return nullptr;
  if (device != "cuda") throw ConfigError(str("--device ", device, ": expected cpu or cuda"));
#if MEMO_HAVE_CUDA
  return make_cuda_backend(0);
#else
  throw ConfigError(
      "--device cuda: this memo was built without the CUDA backend (no CUDA toolkit was found, "
      "or -DMEMO_CUDA=OFF)");
#endif
}

}  // namespace memo::cli
