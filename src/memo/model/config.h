// The model's shape, with Hugging Face LlamaConfig field names (config.json round-trips through
// io/config_json.h). Derived sizes (head_dim, kv width) are functions, never stored twice.
// Two architectures share the struct: LLaMA (RMSNorm, SwiGLU, RoPE, no biases) and GPT-2 (LayerNorm
// with bias, tanh-GELU MLP, biases on every projection, tied head, learned or rotary positions);
// for GPT-2 the LlamaConfig names hold the GPT2Config values (n_embd -> hidden_size, see
// io/config_json.h for the mapping).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memo/model/rope_scaling.h"

namespace memo {

// kQwen2: the LLaMA layer with biases on the q, k and v projections (Hugging Face Qwen2).
// kMistral: the LLaMA layer under Mistral's name, with its sliding window (sliding_window below).
// kQwen3: the LLaMA layer with an RMSNorm over each head of q and k before RoPE (q_norm, k_norm).
enum class Arch { kLlama, kGpt2, kQwen2, kMistral, kQwen3 };
// kLearned: GPT-2's wpe table [max_position_embeddings, C] added to the token embedding.
// kRope: q and k rotated as in the LLaMA layer (Megatron's --position-embedding-type rope).
enum class PositionEmbedding { kRope, kLearned };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int64_t hidden_size = 256;        // C
  int64_t intermediate_size = 688;  // F (GPT-2: n_inner, 4C when null)
  int64_t num_hidden_layers = 4;    // L
  int64_t num_attention_heads = 8;  // H
  int64_t num_key_value_heads = 8;  // Hkv, divides H (GPT-2: equal to H)
  // `head_dim` when the config gives one (Qwen3-0.6B: 128 with C = 1024, H = 16, so H*D != C);
  // 0: derived, C / H. Read it through head_dim().
  int64_t explicit_head_dim = 0;
  int64_t vocab_size = 256;    // V
  double rms_norm_eps = 1e-5;  // the norms' eps: RMSNorm's, or GPT-2's layer_norm_epsilon
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // `rope_scaling` (null: plain RoPE); LLaMA only
  // The sliding window: on a layer that windows, a key is seen by the queries less than this many
  // positions after it; 0 (null): no layer windows. Mistral's windows every layer; Qwen2's and
  // Qwen3's (use_sliding_window) the layers sliding_layers marks. The attention skips the key
  // tiles (and context-parallel chunk pairs) wholly outside the window (backend/attn_mask.h); a
  // backend whose attention cannot window (CUDA, for now) refuses longer sequences.
  int64_t sliding_window = 0;
  // The layers that window, one flag a layer (Qwen2's and Qwen3's layer_types, "sliding_attention"
  // from max_window_layers on by default); empty: every layer, when sliding_window > 0.
  std::vector<bool> sliding_layers;
  int64_t max_position_embeddings = 2048;  // GPT-2: n_positions
  bool tie_word_embeddings = false;        // GPT-2: always true
  double initializer_range = 0.02;         // std of the normal weight init (Hugging Face)
  PositionEmbedding position_embedding = PositionEmbedding::kRope;  // LLaMA: always kRope
  // LLaMA's and Qwen3's attention_bias: biases on q_proj, k_proj, v_proj and o_proj (Qwen2's q/k/v
  // biases are its architecture's, not this field). LLaMA's mlp_bias: on gate, up and down_proj.
  bool attention_bias = false;
  bool mlp_bias = false;

  int64_t head_dim() const {  // D
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads;
  }
  int64_t kv_dim() const { return num_key_value_heads * head_dim(); }  // Hkv * D
  // Layer l's sliding window (0: none).
  int64_t layer_window(int64_t l) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[size_t(l)])
               ? sliding_window
               : 0;
  }
  bool is_gpt2() const { return arch == Arch::kGpt2; }
  // LLaMA's layer (RMSNorm, RoPE, SwiGLU): LLaMA, Qwen2, Mistral and Qwen3.
  bool is_llama_family() const {
    return arch == Arch::kLlama || arch == Arch::kQwen2 || arch == Arch::kMistral ||
           arch == Arch::kQwen3;
  }
  bool uses_rope() const { return position_embedding == PositionEmbedding::kRope; }
  // The config's name for max_position_embeddings in messages: "n_positions" for GPT-2.
  const char* positions_field() const {
    return is_gpt2() ? "n_positions" : "max_position_embeddings";
  }
  // The longest sequence the model runs: max_position_embeddings, or the context a scaling's
  // factor is chosen for (transformers sets no bound): with rope_scaling dynamic, whose NTK-aware
  // base grows with the length past it, factor x max_position_embeddings; with yarn, at least
  // factor x its original context (original_max_position_embeddings, else
  // max_position_embeddings), as vLLM serves it: Qwen2.5's cards turn yarn on by adding
  // rope_scaling and leave max_position_embeddings at the original 32768.
  int64_t max_positions() const;
  // yarn's original context: original_max_position_embeddings, else max_position_embeddings.
  int64_t yarn_original_positions() const;
  // max_positions() in messages: "max_position_embeddings = 4096", or "16384 positions
  // (rope_scaling dynamic: factor 4 x max_position_embeddings = 4096)".
  std::string positions_limit() const;

  // ", sliding window W on every layer" (or "on N of L layers"); empty without a window: what
  // the start-up lines of memo train and memo plan add to the model's shape.
  std::string window_summary() const;

  // Throws ConfigError naming the field, its value and what is allowed.
  void validate() const;
  // The bounds of Note [Sizes a config may ask for] (config.cc); part of validate().
  void check_sizes() const;
  static constexpr int64_t kMaxLayers = 65536;
};

// A loaded model's positions changed for a new run (context extension: `memo train --rope-theta`,
// `--rope-scaling`, `--max-position-embeddings`); the run's saved config.json carries them.
struct PositionOverrides {
  std::optional<double> rope_theta;
  std::optional<RopeScaling> rope_scaling;
  std::optional<int64_t> max_position_embeddings;

  bool any() const { return rope_theta || rope_scaling || max_position_embeddings; }
  // `c` with the overrides, validated (ConfigError naming the flag's field).
  ModelConfig applied_to(ModelConfig c) const;
};

}  // namespace memo
