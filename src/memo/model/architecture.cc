#include "memo/model/architecture.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {

// Defined each in its architecture's file.
const Architecture& llama_architecture();
const Architecture& gpt2_architecture();
const Architecture& qwen2_architecture();
const Architecture& mistral_architecture();
const Architecture& qwen3_architecture();

const Architecture& architecture(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return llama_architecture();
    case Arch::kGpt2:
      return gpt2_architecture();
    case Arch::kQwen2:
      return qwen2_architecture();
    case Arch::kMistral:
      return mistral_architecture();
    case Arch::kQwen3:
      return qwen3_architecture();
  }
  throw ConfigError(str("unknown architecture ", int(arch)));
}

SkeletalLayout skeletal_layout(const ModelConfig& config, DType activations, int64_t tp) {
  SkeletalLayout layout;
  layout.num_layers = int(config.num_hidden_layers);
  layout.hidden_size = config.hidden_size;
  layout.fields = architecture(config.arch).skeletal_fields(config, activations, tp);
  MEMO_CHECK(!layout.fields.empty() && layout.num_fields() <= kMaxSkeletalFields &&
                 layout.fields[0].width == config.hidden_size && !layout.fields[0].per_token,
             "the ", architecture(config.arch).name(),
             " skeletal set must start with the layer input x and have at most ",
             kMaxSkeletalFields, " fields");
  return layout;
}

void layer_rope(Tensor x, int64_t first_row, const LayerContext& ctx, bool backward) {
  const int64_t D = ctx.config->head_dim();
  if (!ctx.positions.empty()) {  // Note [Document masks]: each run with its rows of the tables
    for_each_position_run(
        ctx.positions, first_row, first_row + x.rows(), [&](int64_t row, int64_t pos, int64_t len) {
          const Tensor rows = x.slice_rows(row - first_row, row - first_row + len);
          const ConstTensor c = ctx.rope_cos.slice_rows(pos, pos + len),
                            s = ctx.rope_sin.slice_rows(pos, pos + len);
          if (backward)
            ctx.backend->rope_backward(rows, c, s, D, 0);
          else
            ctx.backend->rope_forward(rows, c, s, D, 0);
        });
    return;
  }
  if (ctx.cp)
    return context_parallel_rope(*ctx.backend, x, ctx.rope_cos, ctx.rope_sin, D, first_row,
                                 ctx.batch, *ctx.cp, backward);
  if (backward)
    ctx.backend->rope_backward(x, ctx.rope_cos, ctx.rope_sin, D, first_row);
  else
    ctx.backend->rope_forward(x, ctx.rope_cos, ctx.rope_sin, D, first_row);
}

bool attention_key_start(std::vector<int32_t>& out, const LayerContext& ctx, int64_t q0, int64_t n,
                         int64_t k0) {
  const int64_t whole = ctx.cp ? ctx.cp->seq : ctx.seq;
  MEMO_CHECK(ctx.window >= 0 || ctx.config->sliding_window == 0,
             "attention_key_start: a context that is no layer's (for_layer)");
  // a window as long as the sequence hides nothing
  const int64_t window = ctx.window > 0 && ctx.window < whole ? ctx.window : 0;
  if (ctx.doc_start.empty() && window == 0) return false;
  MEMO_CHECK(ctx.doc_start.empty() || ctx.doc_start.numel() == ctx.batch * whole,
             "attention_key_start: doc_start ", ctx.doc_start.shape(), " for ", ctx.batch, " x ",
             whole, " tokens");
  for (int64_t b = 0; b < ctx.batch; ++b)
    for (int64_t p = q0; p < q0 + n; ++p) {
      int64_t first = ctx.doc_start.empty() ? 0 : ctx.doc_start.data()[b * whole + p];
      if (window > 0) first = std::max(first, p - window + 1);
      out.push_back(int32_t(first - k0));
    }
  return true;
}

void layer_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                             int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx) {
  if (ctx.cp) return ring_attention_forward(o, lse, q, k, v, n_heads, n_kv_heads, ctx);
  ScopedAct scratch(*ctx.alloc, "attn.fwd_scratch",
                    {ctx.backend->attention_forward_scratch_numel(ctx.seq, ctx.config->head_dim(),
                                                                  n_heads, n_kv_heads)},
                    DType::kF32);
  std::vector<int32_t> key_start;
  const AttnMask mask = attention_key_start(key_start, ctx, 0, ctx.seq, 0)
                            ? AttnMask::causal_from(host_view(key_start))
                            : AttnMask::kCausal;
  ctx.backend->attention_forward(o, lse, q, k, v, ctx.batch, n_heads, n_kv_heads, *scratch, mask);
}

void layer_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                              ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                              int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx) {
  if (ctx.cp)
    return ring_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, n_heads, n_kv_heads, ctx);
  ScopedAct scratch(*ctx.alloc, "attn.bwd_scratch",
                    {ctx.backend->attention_backward_scratch_numel(ctx.seq, ctx.config->head_dim(),
                                                                   n_heads, n_kv_heads)},
                    DType::kF32);
  std::vector<int32_t> key_start;
  const AttnMask mask = attention_key_start(key_start, ctx, 0, ctx.seq, 0)
                            ? AttnMask::causal_from(host_view(key_start))
                            : AttnMask::kCausal;
  ctx.backend->attention_backward(dq, dk, dv, dout, q, k, v, o, lse, ctx.batch, n_heads, n_kv_heads,
                                  *scratch, mask);
}

void check_recompute_rows(const char* fn, int64_t r0, int64_t r1, int64_t T,
                          const LayerContext& ctx) {
  const int64_t g = ctx.backend->reproducible_rows();
  MEMO_CHECK(0 <= r0 && r0 <= r1 && r1 <= T && (g == 0 || r0 % g == 0 || r0 == r1), fn, ": rows [",
             r0, ", ", r1, ") of ", T, " tokens (need a range starting on a multiple of ", g,
             ", the ", ctx.backend->name(), " backend's reproducible rows)");
}

}  // namespace memo
