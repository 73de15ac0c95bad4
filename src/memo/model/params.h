// The model's parameters: one flat fp32 buffer laid out tensor after tensor under their Hugging
// Face names and layouts (Llama, or GPT-2 with its Conv1D [in, out] weights), and typed views of
// it per layer. A checkpoint is the buffer's tensors as they are: no transposes, no renaming.
// Gradients use the same layout in a second buffer, so optimisers work on flat arrays and
// checkpoints map names to ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/tensor.h"
#include "memo/model/config.h"

namespace memo {

// How init_weights starts a tensor (Hugging Face's _init_weights for the architecture).
enum class ParamInit { kNormal, kOne, kZero };

struct ParamInfo {
  std::string name;  // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t>
      shape;           // as Hugging Face stores it: Linear [out, in], GPT-2 Conv1D [in, out]
  int64_t offset = 0;  // elements from the start of the flat buffer (64-byte aligned)
  int64_t numel = 0;
  ParamInit init = ParamInit::kNormal;
  double init_std_scale =
      1.0;  // kNormal: std = initializer_range * this (GPT-2 c_proj: 1/sqrt(2L))
  bool is_matrix() const { return shape.size() == 2; }
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total_numel() const { return total_numel_; }   // with alignment padding
  int64_t count() const;                                 // parameters, without padding
  const ParamInfo& find(const std::string& name) const;  // throws ConfigError if absent

 private:
  void add(std::string name, std::vector<int64_t> shape, ParamInit init, double std_scale = 1.0);
  void add_gpt2(const ModelConfig& config);
  std::vector<ParamInfo> params_;
  int64_t total_numel_ = 0;
};

// Views of one layer's weights (or of their gradients: same struct over the gradient buffer).
// The union of both architectures' tensors; the other architecture's fields stay empty.
struct LayerWeights {
  // LLaMA (Linear weights [out, in]: y = x W^T)
  Tensor ln1;  // [C]          input_layernorm (GPT-2: ln_1.weight)
  Tensor wq;   // [H*D, C]     q_proj
  Tensor wk;   // [Hkv*D, C]   k_proj
  Tensor wv;   // [Hkv*D, C]   v_proj
  Tensor wo;   // [C, H*D]     o_proj
  Tensor ln2;  // [C]          post_attention_layernorm (GPT-2: ln_2.weight)
  Tensor wg;   // [F, C]       gate_proj
  Tensor wu;   // [F, C]       up_proj
  Tensor wd;   // [C, F]       down_proj
  // GPT-2 (Conv1D weights [in, out]: y = x W + b)
  Tensor ln1_b;     // [C]      ln_1.bias
  Tensor w_qkv;     // [C, 3C]  attn.c_attn.weight: columns q | k | v
  Tensor b_qkv;     // [3C]     attn.c_attn.bias
  Tensor w_attn_o;  // [C, C]   attn.c_proj.weight
  Tensor b_attn_o;  // [C]      attn.c_proj.bias
  Tensor ln2_b;     // [C]      ln_2.bias
  Tensor w_fc;      // [C, F]   mlp.c_fc.weight
  Tensor b_fc;      // [F]      mlp.c_fc.bias
  Tensor w_mlp_o;   // [F, C]   mlp.c_proj.weight
  Tensor b_mlp_o;   // [C]      mlp.c_proj.bias
};

struct ModelWeights {
  Tensor embed;  // [V, C] model.embed_tokens (GPT-2: transformer.wte)
  Tensor pos;    // [P, C] transformer.wpe, GPT-2 with learned positions only; else empty
  std::vector<LayerWeights> layers;
  Tensor norm;    // [C]    model.norm (GPT-2: transformer.ln_f.weight)
  Tensor norm_b;  // [C]    transformer.ln_f.bias (GPT-2 only)
  Tensor head;    // [V, C] lm_head, or the embedding itself when tied
};

// Binds views over a flat buffer laid out by `layout` (parameters or gradients).
ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, float* base);

// Hugging Face init, per ParamInfo::init: Llama's Linear and Embedding weights ~ N(0, std), norm
// weights = 1; GPT-2's Conv1D and embedding weights ~ N(0, std), the two c_proj weights
// ~ N(0, std / sqrt(2 L)), biases 0, LayerNorm weights 1 and biases 0. Deterministic for a seed
// (one counter-based stream per tensor).
void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed);

}  // namespace memo
