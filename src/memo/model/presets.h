// Model-size presets as plain data: the MEMO paper's GPT sizes (arXiv 2407.12117, Table 2) and
// LLaMA-1 sizes as memo ModelConfigs. A GptPreset
// becomes a trainable GPT-2 config with rotary positions through gpt_preset_config.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memo/model/config.h"

namespace memo {

// A GPT-style (Megatron) model as the MEMO paper's Table 2 gives it: LayerNorm, GeLU FFN, biases,
// tied input and output embedding.
struct GptPreset {
  std::string name;  // "gpt-7b"
  int64_t layers{};  // L
  int64_t hidden{};  // C
  int64_t heads{};   // H
  int64_t ffn{};     // F = 4 C
  int64_t vocab{};   // V = 50257

  // Parameters: per layer QKV + output projection with biases (4C^2 + 4C), GeLU FFN with biases
  // (2 C F + F + C) and two LayerNorms (4C); then the tied embedding (V C) and the final LayerNorm
  // (2C). No position embedding: learned ones scale with the sequence length, which a preset does
  // not fix. With F = 4C this is 12 L C^2 + 13 L C + V C + 2C.
  int64_t param_count() const;
};

// The preset as a GPT-2 ModelConfig with rotary positions (Megatron's
// --position-embedding-type rope: no wpe table, so ParamLayout(config).count() equals
// param_count()), room for n_positions tokens, vocab and init as GPT-2 (initializer_range 0.02,
// layer_norm_epsilon 1e-5). Validated.
ModelConfig gpt_preset_config(const GptPreset& preset, int64_t n_positions);

// gpt-7b, gpt-13b, gpt-30b, gpt-65b, in that order.
std::vector<GptPreset> gpt_presets();
// Case-insensitive; an unknown name throws ConfigError listing the known ones.
GptPreset gpt_preset(std::string_view name);

// llama-7b, llama-13b, llama-30b, llama-65b, in that order.
std::vector<std::string> llama_preset_names();
// The LLaMA-1 shapes with Hugging Face LlamaConfig values (vocab 32000, rms_norm_eps 1e-6, 2048
// positions, untied head). Case-insensitive; an unknown name throws ConfigError listing the known
// ones. Parameter count: ParamLayout(config).count() (model/params.h).
ModelConfig llama_preset(std::string_view name);

}  // namespace memo
