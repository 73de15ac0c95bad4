// One GPU as the planner and cost model see it: peak dense bf16 compute, device memory and the two
// links (host and NVLink). Plain data; reading it from hardware/*.json is io/hardware_json.h,
// because model/ does not include io/. Figures are vendor nominal peaks, not measured rates.
#pragma once

#include <cstdint>
#include <string>

namespace memo {

struct GpuSpec {
  std::string name;                  // for people: "NVIDIA A800 SXM4 80GB"
  double peak_bf16_flops = 0;        // FLOP/s, dense bf16 tensor-core peak (no sparsity)
  int64_t memory_bytes = 0;          // device memory, bytes
  double host_link_bytes_per_s = 0;  // PCIe, one direction, nominal
  double nvlink_bytes_per_s = 0;     // NVLink total bidirectional per GPU; 0: none
  std::string source;                // where the figures come from (datasheet names)

  // Throws ConfigError naming the field, its value and what is allowed: every figure must be
  // positive (nvlink_bytes_per_s may be 0) and finite, and the name non-empty.
  void validate() const;
};

}  // namespace memo
