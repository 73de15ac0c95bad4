// ModelConfig <-> config.json with Hugging Face field names, so a memo checkpoint loads in
// transformers and a config.json from the Hub loads here. model_type picks the reader: "llama"
// (or absent) for LlamaConfig names ("qwen2", "qwen3", "mistral": theirs), "gpt2" for GPT2Config
// names. Not a general HF config reader: fields that would change the math memo implements are
// rejected (LLaMA: another activation, partial rotary; Qwen2 and Qwen3: a layer type other than
// full or sliding attention; Mistral: a layer_types other than its window's; GPT-2: another
// activation_function, scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, unscaled
// attention, an untied head); other unknown fields are ignored, GPT-2's dropout rates included
// (memo trains without dropout).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "memo/core/dtype.h"
#include "memo/model/config.h"

namespace memo {

// Reads and validates a config.json. Missing file: DataError; malformed JSON, a field of the wrong
// type or an invalid value: ConfigError naming the path and the field.
ModelConfig load_model_config(const std::filesystem::path& path);

// `where` names the source in messages (a path, "--config"). GPT-2 (model_type "gpt2"): required
// n_embd, n_layer, n_head, vocab_size; optional with GPT2Config defaults n_inner (null: 4 n_embd),
// n_positions 1024 (n_ctx, if given, must equal it), layer_norm_epsilon 1e-5, initializer_range
// 0.02, and memo's "memo_position_embedding_type": "learned" (default) or "rope" (then rope_theta,
// default 10000). LLaMA: required hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, vocab_size. Absent optional fields
// take the Hugging Face LlamaConfig defaults: num_key_value_heads = num_attention_heads,
// rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings 2048, tie_word_embeddings false,
// initializer_range 0.02. A null value counts as absent. transformers 5's `rope_parameters`
// (rope_theta and rope_scaling in one object) is read as those two; given beside them, it must
// agree with them. Calls validate().
// A `rope_scaling` object (transformers' fields; null: plain RoPE), checked field by field; the
// head-dependent checks are ModelConfig::validate's. ConfigError names `where`, `field_name` (the
// object's name in the file) and the field.
RopeScaling rope_scaling_from_json(const nlohmann::json& j, std::string_view where,
                                   const char* field_name = "rope_scaling");

ModelConfig model_config_from_json(const nlohmann::json& json, std::string_view where);

// The dtype the weights are stored in, as config.json's torch_dtype says (transformers 5 writes
// it as "dtype"): "float32", "bfloat16" or "float16"; nullopt when absent. Not a ModelConfig
// field: the same model may be stored in any dtype. Another value: ConfigError naming `where` and
// the field (model_config_from_json checks it too).
std::optional<DType> torch_dtype_from_json(const nlohmann::json& j, std::string_view where);
// "float32", "bfloat16", "float16"; ConfigError for a dtype without a torch_dtype name.
const char* torch_dtype_name(DType dtype);

// All ModelConfig fields plus architectures, model_type, hidden_act and torch_dtype (the dtype the
// checkpoint's weights are stored in), which transformers needs to build LlamaForCausalLM; for
// GPT-2, the GPT2Config names (GPT2LMHeadModel, dropout rates 0) and memo_position_embedding_type.
nlohmann::json model_config_to_json(const ModelConfig& config, DType torch_dtype = DType::kF32);

// model_config_to_json written atomically, indented, with a trailing newline.
void save_model_config(const std::filesystem::path& path, const ModelConfig& config,
                       DType torch_dtype = DType::kF32);

}  // namespace memo
