// The model's shape, with Hugging Face LlamaConfig field names (config.json round-trips through
// io/config_json.h). Derived sizes (head_dim, kv width) are functions, never stored twice.
#pragma once

#include <cstdint>
#include <string>

namespace memo {

struct ModelConfig {
  int64_t hidden_size = 256;           // C
  int64_t intermediate_size = 688;     // F
  int64_t num_hidden_layers = 4;       // L
  int64_t num_attention_heads = 8;     // H
  int64_t num_key_value_heads = 8;     // Hkv, divides H
  int64_t vocab_size = 256;            // V
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;     // std of the normal weight init (Hugging Face)

  int64_t head_dim() const { return hidden_size / num_attention_heads; }  // D
  int64_t kv_dim() const { return num_key_value_heads * head_dim(); }     // Hkv * D

  // Throws ConfigError naming the field, its value and what is allowed.
  void validate() const;
};

}  // namespace memo
