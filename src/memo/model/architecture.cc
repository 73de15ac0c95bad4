#include "memo/model/architecture.h"

#include "memo/core/error.h"

namespace memo {

// Defined each in its architecture's file.
const Architecture& llama_architecture();
const Architecture& gpt2_architecture();

const Architecture& architecture(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return llama_architecture();
    case Arch::kGpt2:
      return gpt2_architecture();
  }
  throw ConfigError(str("unknown architecture ", int(arch)));
}

SkeletalLayout skeletal_layout(const ModelConfig& config, DType activations) {
  SkeletalLayout layout;
  layout.num_layers = int(config.num_hidden_layers);
  layout.hidden_size = config.hidden_size;
  layout.fields = architecture(config.arch).skeletal_fields(config, activations);
  MEMO_CHECK(!layout.fields.empty() && layout.num_fields() <= kMaxSkeletalFields &&
                 layout.fields[0].width == config.hidden_size && !layout.fields[0].per_token,
             "the ", architecture(config.arch).name(),
             " skeletal set must start with the layer input x and have at most ",
             kMaxSkeletalFields, " fields");
  return layout;
}

void check_recompute_rows(const char* fn, int64_t r0, int64_t r1, int64_t T,
                          const LayerContext& ctx) {
  const int64_t g = ctx.backend->reproducible_rows();
  MEMO_CHECK(0 <= r0 && r0 <= r1 && r1 <= T && (g == 0 || r0 % g == 0 || r0 == r1), fn, ": rows [",
             r0, ", ", r1, ") of ", T, " tokens (need a range starting on a multiple of ", g,
             ", the ", ctx.backend->name(), " backend's reproducible rows)");
}

}  // namespace memo
