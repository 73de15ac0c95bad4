// ModelConfig <-> config.json with Hugging Face LlamaConfig field names, so a memo checkpoint loads
// in transformers and a Llama config.json from the Hub loads here. Not a general HF config reader:
// fields that would change the math memo implements (rope_scaling, biases, another activation,
// a head_dim other than hidden_size / num_attention_heads) are rejected, other unknown fields
// are ignored.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "memo/model/config.h"

namespace memo {

// Reads and validates a config.json. Missing file: DataError; malformed JSON, a field of the wrong
// type or an invalid value: ConfigError naming the path and the field.
ModelConfig load_model_config(const std::filesystem::path& path);

// `where` names the source in messages (a path, "--config"). Required: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, vocab_size. Absent optional fields
// take the Hugging Face LlamaConfig defaults: num_key_value_heads = num_attention_heads,
// rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings 2048, tie_word_embeddings false,
// initializer_range 0.02. A null value counts as absent. Calls validate().
ModelConfig model_config_from_json(const nlohmann::json& json, std::string_view where);

// All ModelConfig fields plus architectures, model_type, hidden_act and torch_dtype, which
// transformers needs to build LlamaForCausalLM.
nlohmann::json model_config_to_json(const ModelConfig& config);

// model_config_to_json written atomically, indented, with a trailing newline.
void save_model_config(const std::filesystem::path& path, const ModelConfig& config);

}  // namespace memo
