// Implementation of model/hardware.h.
#include "memo/model/hardware.h"

#include <cmath>

#include "memo/core/error.h"

namespace memo {

void GpuSpec::validate() const {
  if (name.empty()) throw ConfigError("name is empty; give the GPU's name, e.g. \"NVIDIA H100\"");
  auto positive = [](const char* field, double v, const char* unit) {
    if (!(v > 0) || !std::isfinite(v))
      throw ConfigError(str(field, " = ", v, " must be a positive number of ", unit));
  };
  positive("peak_bf16_flops", peak_bf16_flops, "FLOP/s");
  if (memory_bytes <= 0)
    throw ConfigError(str("memory_bytes = ", memory_bytes, " must be a positive number of bytes"));
  positive("host_link_bytes_per_s", host_link_bytes_per_s, "bytes/s");
  if (!(nvlink_bytes_per_s >= 0) || !std::isfinite(nvlink_bytes_per_s))
    throw ConfigError(str("nvlink_bytes_per_s = ", nvlink_bytes_per_s,
                          " must be a non-negative number of bytes/s (0: no NVLink)"));
}

}  // namespace memo
