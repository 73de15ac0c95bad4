// The model's parameters: one flat fp32 buffer laid out tensor after tensor under their Hugging
// Face Llama names, and typed views of it per layer. Gradients use the same layout in a second
// buffer, so optimisers work on flat arrays and checkpoints map names to ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/tensor.h"
#include "memo/model/config.h"

namespace memo {

struct ParamInfo {
  std::string name;            // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as Hugging Face stores it: Linear weights are [out, in]
  int64_t offset = 0;          // elements from the start of the flat buffer (64-byte aligned)
  int64_t numel = 0;
  bool is_matrix() const { return shape.size() == 2; }
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total_numel() const { return total_numel_; }  // with alignment padding
  int64_t count() const;                                 // parameters, without padding
  const ParamInfo& find(const std::string& name) const;  // throws ConfigError if absent

 private:
  void add(std::string name, std::vector<int64_t> shape);
  std::vector<ParamInfo> params_;
  int64_t total_numel_ = 0;
};

// Views of one layer's weights (or of their gradients: same struct over the gradient buffer).
struct LayerWeights {
  Tensor ln1;  // [C]          input_layernorm
  Tensor wq;   // [H*D, C]     q_proj
  Tensor wk;   // [Hkv*D, C]   k_proj
  Tensor wv;   // [Hkv*D, C]   v_proj
  Tensor wo;   // [C, H*D]     o_proj
  Tensor ln2;  // [C]          post_attention_layernorm
  Tensor wg;   // [F, C]       gate_proj
  Tensor wu;   // [F, C]       up_proj
  Tensor wd;   // [C, F]       down_proj
};

struct ModelWeights {
  Tensor embed;  // [V, C] model.embed_tokens
  std::vector<LayerWeights> layers;
  Tensor norm;  // [C]    model.norm
  Tensor head;  // [V, C] lm_head, or the embedding itself when tied
};

// Binds views over a flat buffer laid out by `layout` (parameters or gradients).
ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, float* base);

// Hugging Face LlamaPreTrainedModel init: Linear and Embedding weights ~ N(0, initializer_range),
// norm weights = 1. Deterministic for a seed (one counter-based stream per tensor).
void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed);

}  // namespace memo
