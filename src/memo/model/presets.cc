// Implementation of model/presets.h.
#include "memo/model/presets.h"

#include <algorithm>
#include <cctype>

#include "memo/core/error.h"

namespace memo {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct LlamaShape {
  const char* name;
  int64_t layers, hidden, intermediate, heads;  // L, C, F, H
};

// LLaMA-1 (Touvron et al. 2023, Table 2) with the Hugging Face conversions' intermediate sizes.
constexpr LlamaShape kLlamaShapes[] = {
    {"llama-7b", 32, 4096, 11008, 32},
    {"llama-13b", 40, 5120, 13824, 40},
    {"llama-30b", 60, 6656, 17920, 52},
    {"llama-65b", 80, 8192, 22016, 64},
};

}  // namespace

int64_t GptPreset::param_count() const {
  const int64_t C = hidden, F = ffn, L = layers, V = vocab;
  const int64_t attention = 4 * C * C + 4 * C;  // QKV [3C, C] + bias, output [C, C] + bias
  const int64_t mlp = 2 * C * F + F + C;        // up [F, C] + bias, down [C, F] + bias
  const int64_t layer_norms = 4 * C;            // two LayerNorms, weight and bias
  return L * (attention + mlp + layer_norms) + V * C + 2 * C;  // + tied embedding, final norm
}

ModelConfig gpt_preset_config(const GptPreset& preset, int64_t n_positions) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.position_embedding = PositionEmbedding::kRope;
  c.hidden_size = preset.hidden;
  c.intermediate_size = preset.ffn;
  c.num_hidden_layers = preset.layers;
  c.num_attention_heads = preset.heads;
  c.num_key_value_heads = preset.heads;
  c.vocab_size = preset.vocab;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = n_positions;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.02;
  c.validate();
  return c;
}

std::vector<GptPreset> gpt_presets() {
  constexpr int64_t kVocab = 50257;  // GPT-2 tokenizer, as in the paper's Table 2
  return {
      {"gpt-7b", 32, 4096, 32, 4 * 4096, kVocab},
      {"gpt-13b", 40, 5120, 40, 4 * 5120, kVocab},
      {"gpt-30b", 48, 7168, 56, 4 * 7168, kVocab},
      {"gpt-65b", 80, 8192, 64, 4 * 8192, kVocab},
  };
}

GptPreset gpt_preset(std::string_view name) {
  const std::string key = lower(name);
  std::string known;
  for (const GptPreset& p : gpt_presets()) {
    if (p.name == key) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw ConfigError(str("unknown GPT preset '", name, "'; known: ", known));
}

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> names;
  for (const LlamaShape& s : kLlamaShapes) names.push_back(s.name);
  return names;
}

ModelConfig llama_preset(std::string_view name) {
  const std::string key = lower(name);
  for (const LlamaShape& s : kLlamaShapes) {
    if (key != s.name) continue;
    ModelConfig c;
    c.num_hidden_layers = s.layers;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.intermediate;
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.heads;
    c.vocab_size = 32000;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.max_position_embeddings = 2048;
    c.tie_word_embeddings = false;
    c.initializer_range = 0.02;
    c.validate();
    return c;
  }
  std::string known;
  for (const std::string& n : llama_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(str("unknown LLaMA preset '", name, "'; known: ", known));
}

}  // namespace memo
