// Implementation of io/config_json.h.
#include "memo/io/config_json.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/io/atomic_file.h"
#include "memo/io/json_file.h"

namespace memo {
namespace {

using nlohmann::json;

// memo's own GPT-2 field (transformers keeps unknown fields as attributes and ignores them here):
// "learned" (default, GPT-2's wpe) or "rope" (rotary q and k, with rope_theta).
constexpr const char* kMemoPositionField = "memo_position_embedding_type";

const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

void read_int(const json& j, std::string_view where, const char* name, int64_t& out) {
  const json* v = field(j, name);
  if (!v) return;
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw ConfigError(str(where, ": field ", name, " = ", v->dump(), " is too large"));
  if (!v->is_number_integer()) wrong_type(where, name, *v, "an integer");
  out = v->get<int64_t>();
}

void read_double(const json& j, std::string_view where, const char* name, double& out) {
  const json* v = field(j, name);
  if (!v) return;
  if (!v->is_number()) wrong_type(where, name, *v, "a number");
  out = v->get<double>();
}

void read_bool(const json& j, std::string_view where, const char* name, bool& out) {
  const json* v = field(j, name);
  if (!v) return;
  if (!v->is_boolean()) wrong_type(where, name, *v, "true or false");
  out = v->get<bool>();
}

void require(const json& j, std::string_view where, const char* name) {
  if (!field(j, name)) throw ConfigError(str(where, ": required field ", name, " is missing"));
}

void read_list(const json& j, std::string_view where, const char* name, std::vector<double>& out) {
  const json* v = field(j, name);
  if (!v) return;
  if (!v->is_array()) wrong_type(where, name, *v, "a list of numbers");
  out.clear();
  for (const json& x : *v) {
    if (!x.is_number()) wrong_type(where, name, *v, "a list of numbers");
    out.push_back(x.get<double>());
  }
}

}  // namespace

// `type` is the older spelling of `rope_type`. Every key must be one the type takes: a key memo
// would ignore could mean a different model.
RopeScaling rope_scaling_from_json(const json& j, std::string_view config_where,
                                   const char* field_name) {
  const std::string where = str(config_where, ": ", field_name);
  if (j.is_null()) return RopeScaling{};
  if (!j.is_object()) wrong_type(config_where, field_name, j, "an object or null");
  const json* type = field(j, "rope_type");
  const json* old_type = field(j, "type");
  if (type && old_type && *type != *old_type)
    throw ConfigError(
        str(where, ": rope_type = ", type->dump(), " and type = ", old_type->dump(), " disagree"));
  if (!type) type = old_type;
  if (!type) throw ConfigError(str(where, ": required field rope_type is missing"));
  if (!type->is_string()) wrong_type(where, "rope_type", *type, "a string");
  RopeScaling s;
  try {
    s.type = rope_type_from_name(type->get<std::string>());
  } catch (const ConfigError& e) {
    throw ConfigError(str(config_where, ": ", e.what()));
  }
  std::vector<std::string> takes{"rope_type", "type"}, needs;
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
    case RopeType::kDynamic:
      needs = {"factor"};
      break;
    case RopeType::kYarn:
      needs = {"factor"};
      takes.insert(takes.end(), {"original_max_position_embeddings", "attention_factor",
                                 "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"});
      break;
    case RopeType::kLongrope:
      needs = {"short_factor", "long_factor"};
      takes.insert(takes.end(), {"factor", "attention_factor", "original_max_position_embeddings"});
      break;
    case RopeType::kLlama3:
      needs = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
      break;
  }
  takes.insert(takes.end(), needs.begin(), needs.end());
  for (const auto& [key, value] : j.items()) {
    if (std::find(takes.begin(), takes.end(), key) == takes.end())
      throw ConfigError(str(where, ": field ", key, " = ", json_excerpt(value), " is not one ",
                            rope_type_name(s.type), " takes; memo does not implement it"));
  }
  for (const std::string& key : needs) require(j, where, key.c_str());
  s.factor_given = field(j, "factor") != nullptr;
  read_double(j, where, "factor", s.factor);
  read_int(j, where, "original_max_position_embeddings", s.original_max_position_embeddings);
  if (field(j, "original_max_position_embeddings") && s.original_max_position_embeddings <= 0)
    throw ConfigError(str(where, ": original_max_position_embeddings = ",
                          s.original_max_position_embeddings, " must be positive"));
  auto read_optional = [&](const char* name, std::optional<double>& out) {
    if (!field(j, name)) return;
    double v = 0;
    read_double(j, where, name, v);
    out = v;
  };
  read_optional("attention_factor", s.attention_factor);
  read_optional("mscale", s.mscale);
  read_optional("mscale_all_dim", s.mscale_all_dim);
  read_double(j, where, "beta_fast", s.beta_fast);
  read_double(j, where, "beta_slow", s.beta_slow);
  read_bool(j, where, "truncate", s.truncate);
  read_double(j, where, "low_freq_factor", s.low_freq_factor);
  read_double(j, where, "high_freq_factor", s.high_freq_factor);
  read_list(j, where, "short_factor", s.short_factor);
  read_list(j, where, "long_factor", s.long_factor);
  return s;
}

namespace {

json rope_scaling_to_json(const RopeScaling& s) {
  json j{{"rope_type", rope_type_name(s.type)}};
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
    case RopeType::kDynamic:
      j["factor"] = s.factor;
      break;
    case RopeType::kYarn:
      j["factor"] = s.factor;
      j["beta_fast"] = s.beta_fast;
      j["beta_slow"] = s.beta_slow;
      j["truncate"] = s.truncate;
      if (s.attention_factor) j["attention_factor"] = *s.attention_factor;
      if (s.mscale) j["mscale"] = *s.mscale;
      if (s.mscale_all_dim) j["mscale_all_dim"] = *s.mscale_all_dim;
      break;
    case RopeType::kLongrope:
      j["short_factor"] = s.short_factor;
      j["long_factor"] = s.long_factor;
      if (s.factor_given) j["factor"] = s.factor;
      if (s.attention_factor) j["attention_factor"] = *s.attention_factor;
      break;
    case RopeType::kLlama3:
      j["factor"] = s.factor;
      j["low_freq_factor"] = s.low_freq_factor;
      j["high_freq_factor"] = s.high_freq_factor;
      break;
  }
  if (s.original_max_position_embeddings > 0)
    j["original_max_position_embeddings"] = s.original_max_position_embeddings;
  return j;
}

// transformers 5's `rope_parameters`: rope_theta and rope_scaling as one object (rope_type, default
// "default"; rope_theta; the type's fields), which its configs write instead of the two older
// fields (modeling_rope_utils.py, RotaryEmbeddingConfigMixin). Read into the same ModelConfig
// fields; where an older field is given too, both must say the same (transformers would take
// rope_parameters' theta but rope_scaling's scaling: a config that has them disagree is refused).
// A theta absent from both is LlamaConfig's default, as in transformers.
void read_rope_parameters(const json& j, std::string_view where, ModelConfig& c) {
  const json* p = field(j, "rope_parameters");
  if (!p) return;
  if (!p->is_object()) wrong_type(where, "rope_parameters", *p, "an object or null");
  const std::string at = str(where, ": rope_parameters");
  for (const auto& [key, value] : p->items())
    if (value.is_object())  // {"full_attention": {...}, "sliding_attention": {...}}
      throw ConfigError(str(at, ": field ", key,
                            " holds an object: rotary settings per layer type are not supported; "
                            "memo rotates every layer alike"));
  json scaling = *p;
  if (field(*p, "rope_theta")) {
    double theta = 0;
    read_double(*p, at, "rope_theta", theta);
    if (field(j, "rope_theta") && theta != c.rope_theta)
      throw ConfigError(str(where, ": rope_theta = ", c.rope_theta, " and rope_parameters' ", theta,
                            " disagree; give one"));
    c.rope_theta = theta;
  }
  if (field(*p, "partial_rotary_factor")) {
    double partial = 1.0;
    read_double(*p, at, "partial_rotary_factor", partial);
    if (partial != 1.0)
      throw ConfigError(str(at, ": partial_rotary_factor = ", partial,
                            " is not supported; memo rotates whole heads (1.0)"));
  }
  scaling.erase("rope_theta");
  scaling.erase("partial_rotary_factor");
  if (!field(scaling, "rope_type") && !field(scaling, "type")) scaling["rope_type"] = "default";
  const RopeScaling s = rope_scaling_from_json(scaling, where, "rope_parameters");
  if (field(j, "rope_scaling") && !(s == c.rope_scaling))
    throw ConfigError(str(where, ": rope_scaling and rope_parameters give different scalings ",
                          "(rope_type ", rope_type_name(c.rope_scaling.type), " and ",
                          rope_type_name(s.type), "); give one"));
  c.rope_scaling = s;
}

// layer_types: each layer's attention, "full_attention" or "sliding_attention" (one a layer);
// empty when absent.
std::vector<bool> read_layer_types(const json& j, std::string_view where, int64_t layers) {
  const json* v = field(j, "layer_types");
  if (!v) return {};
  if (!v->is_array()) wrong_type(where, "layer_types", *v, "a list of strings");
  if (int64_t(v->size()) != layers)
    throw ConfigError(
        str(where, ": layer_types names ", v->size(), " layers; num_hidden_layers is ", layers));
  std::vector<bool> sliding;
  for (size_t i = 0; i < v->size(); ++i) {
    if ((*v)[i] != "full_attention" && (*v)[i] != "sliding_attention")
      throw ConfigError(str(where, ": layer_types[", i, "] = ", json_excerpt((*v)[i]),
                            " is not supported; memo's layers are \"full_attention\" or "
                            "\"sliding_attention\""));
    sliding.push_back((*v)[i] == "sliding_attention");
  }
  return sliding;
}

// Qwen2Config's and Qwen3Config's window: sliding_window (default 4096; null: none) only under
// use_sliding_window; on the layers layer_types names "sliding_attention", by default those from
// max_window_layers (default 28) on, as transformers builds layer_types (configuration_qwen2.py;
// its docstring once said the bottom layers, its code has always windowed the top ones). A
// "sliding_attention" layer with no window is refused (transformers cannot build its mask).
void read_qwen_window(const json& j, std::string_view where, ModelConfig& c) {
  bool use = false;
  read_bool(j, where, "use_sliding_window", use);
  int64_t window = 4096;
  if (j.contains("sliding_window") && j.at("sliding_window").is_null()) window = 0;
  read_int(j, where, "sliding_window", window);
  if (use && field(j, "sliding_window") && window <= 0)
    throw ConfigError(
        str(where, ": sliding_window = ", window, " must be positive (or null: no window)"));
  if (!use) window = 0;
  int64_t first = 28;
  read_int(j, where, "max_window_layers", first);
  if (first < 0)
    throw ConfigError(str(where, ": max_window_layers = ", first, " must be 0 or more"));
  std::vector<bool> sliding = read_layer_types(j, where, c.num_hidden_layers);
  if (sliding.empty())
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) sliding.push_back(window > 0 && l >= first);
  const auto any = std::find(sliding.begin(), sliding.end(), true);
  if (any != sliding.end() && window == 0)
    throw ConfigError(str(where, ": layer_types[", any - sliding.begin(),
                          "] = \"sliding_attention\" has no window: ",
                          use ? "sliding_window is null" : "use_sliding_window is false"));
  if (any == sliding.end()) return;  // no layer windows
  c.sliding_window = window;
  if (std::find(sliding.begin(), sliding.end(), false) != sliding.end())
    c.sliding_layers = std::move(sliding);
}

// MistralForCausalLM windows every layer whatever layer_types says (transformers warns and points
// to Ministral's classes): a layer_types that says otherwise is refused, not ignored.
void check_mistral_layer_types(const json& j, std::string_view where, const ModelConfig& c) {
  const std::vector<bool> sliding = read_layer_types(j, where, c.num_hidden_layers);
  for (size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i] != (c.sliding_window > 0))
      throw ConfigError(str(where, ": layer_types[", i,
                            "] = ", sliding[i] ? "\"sliding_attention\"" : "\"full_attention\"",
                            " is not supported: MistralForCausalLM ",
                            c.sliding_window > 0 ? "windows every layer" : "has no window",
                            " (layer types that alternate are Ministral's)"));
}

// A quantised checkpoint's weights mean something else than their stored values.
void reject_quantization(const json& j, std::string_view where) {
  if (const json* v = field(j, "quantization_config"); v && !v->is_null())
    throw ConfigError(str(
        where, ": quantization_config is not supported (",
        v->is_object() ? v->value("quant_method", std::string("a method")) : std::string("given"),
        "); memo loads unquantised bf16, f16 or f32 weights: dequantise the "
        "model first"));
}

// Fields memo does not implement; accepting them silently would train or load a different model.
void reject_unsupported(const json& j, std::string_view where, const ModelConfig& c) {
  reject_quantization(j, where);
  double partial = 1.0;
  read_double(j, where, "partial_rotary_factor", partial);
  if (partial != 1.0)
    throw ConfigError(str(where, ": partial_rotary_factor = ", partial,
                          " is not supported; memo rotates whole heads (1.0)"));
  if (const json* v = field(j, "hidden_act"); v && *v != "silu")
    throw ConfigError(str(where, ": hidden_act = ", v->dump(), " is not supported; only \"silu\""));
}

// GPT2Config fields that would change the math memo implements.
void reject_unsupported_gpt2(const json& j, std::string_view where) {
  reject_quantization(j, where);
  for (const char* name : {"rope_scaling", "rope_parameters"})
    if (const json* v = field(j, name))
      throw ConfigError(str(where, ": ", name, " = ", v->dump(),
                            " is not supported for GPT-2; memo's GPT-2 rotates with plain RoPE "
                            "(memo_position_embedding_type \"rope\", rope_theta)"));
  if (const json* v = field(j, "activation_function");
      v && *v != "gelu_new" && *v != "gelu_pytorch_tanh")
    throw ConfigError(str(where, ": activation_function = ", v->dump(),
                          " is not supported; memo's GPT-2 uses the tanh GELU (\"gelu_new\" or "
                          "\"gelu_pytorch_tanh\")"));
  for (const char* name :
       {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"}) {
    bool on = false;
    read_bool(j, where, name, on);
    if (on) throw ConfigError(str(where, ": ", name, " = true is not supported; set it to false"));
  }
  bool scale = true;
  read_bool(j, where, "scale_attn_weights", scale);
  if (!scale)
    throw ConfigError(str(where,
                          ": scale_attn_weights = false is not supported; memo scales "
                          "attention scores by 1/sqrt(head_dim)"));
  bool tied = true;
  read_bool(j, where, "tie_word_embeddings", tied);
  if (!tied)
    throw ConfigError(str(where,
                          ": tie_word_embeddings = false is not supported; GPT-2's head "
                          "is wte"));
}

ModelConfig gpt2_config_from_json(const json& j, std::string_view where) {
  for (const char* name : {"n_embd", "n_layer", "n_head", "vocab_size"}) require(j, where, name);
  if (j.contains("head_dim") && !j.at("head_dim").is_null())
    throw ConfigError(str(where, ": head_dim is not a GPT-2 field (GPT2Config ignores it: the ",
                          "head dim is n_embd / n_head); leave it out"));
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.position_embedding = PositionEmbedding::kLearned;
  c.rms_norm_eps = 1e-5;  // Hugging Face GPT2Config defaults for the optional fields
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 1024;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.02;
  read_int(j, where, "n_embd", c.hidden_size);
  read_int(j, where, "n_layer", c.num_hidden_layers);
  read_int(j, where, "n_head", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  read_int(j, where, "vocab_size", c.vocab_size);
  c.intermediate_size = 4 * c.hidden_size;  // n_inner null
  read_int(j, where, "n_inner", c.intermediate_size);
  read_int(j, where, "n_positions", c.max_position_embeddings);
  int64_t n_ctx = c.max_position_embeddings;
  read_int(j, where, "n_ctx", n_ctx);
  if (n_ctx != c.max_position_embeddings)
    throw ConfigError(str(where, ": n_ctx = ", n_ctx, " differs from n_positions = ",
                          c.max_position_embeddings, "; memo needs them equal (or n_ctx absent)"));
  read_double(j, where, "layer_norm_epsilon", c.rms_norm_eps);
  read_double(j, where, "initializer_range", c.initializer_range);
  if (const json* v = field(j, kMemoPositionField)) {
    if (*v == "rope") {
      c.position_embedding = PositionEmbedding::kRope;
      read_double(j, where, "rope_theta", c.rope_theta);
    } else if (*v != "learned") {
      throw ConfigError(str(where, ": ", kMemoPositionField, " = ", v->dump(),
                            " is not supported; use \"learned\" (GPT-2's wpe) or \"rope\""));
    }
  }
  reject_unsupported_gpt2(j, where);
  return c;
}

// LlamaConfig, Qwen2Config and Qwen3Config (kQwen2, kQwen3: the same fields, q/k/v biases implied
// or q/k norms, a sliding window on some layers) or MistralConfig (kMistral: the same fields and
// sliding_window on every layer).
ModelConfig llama_config_from_json(const json& j, std::string_view where, Arch arch) {
  for (const char* name : {"hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "vocab_size"})
    require(j, where, name);
  ModelConfig c;
  c.arch = arch;
  c.rms_norm_eps = 1e-6;  // Hugging Face LlamaConfig / Qwen2Config defaults for optional fields
  c.rope_theta = 10000.0;
  c.max_position_embeddings = arch == Arch::kQwen2 || arch == Arch::kQwen3 ? 32768
                              : arch == Arch::kMistral                     ? 131072
                                                                           : 2048;
  if (arch == Arch::kMistral) {
    c.sliding_window = 4096;  // MistralConfig's default
    if (j.contains("sliding_window") && j.at("sliding_window").is_null()) c.sliding_window = 0;
    read_int(j, where, "sliding_window", c.sliding_window);
    if (j.contains("sliding_window") && !j.at("sliding_window").is_null() && c.sliding_window <= 0)
      throw ConfigError(str(where, ": sliding_window = ", c.sliding_window,
                            " must be positive (or null: no window)"));
  }
  if (arch == Arch::kQwen3) c.explicit_head_dim = 128;  // Qwen3Config's default
  // LlamaConfig's attention_bias (q, k, v, o) and mlp_bias (gate, up, down); Qwen3Config has the
  // first; the others neither (a true one is refused by name, see ModelConfig::validate)
  read_bool(j, where, "attention_bias", c.attention_bias);
  read_bool(j, where, "mlp_bias", c.mlp_bias);
  if (c.attention_bias && arch != Arch::kLlama && arch != Arch::kQwen3)
    throw ConfigError(str(where, ": attention_bias = true is not supported for ",
                          j.at("model_type"), "; it is LLaMA's and Qwen3's"));
  if (c.mlp_bias && arch != Arch::kLlama)
    throw ConfigError(str(where, ": mlp_bias = true is not supported for ", j.at("model_type"),
                          "; it is LLaMA's"));
  if (j.contains("head_dim") && j.at("head_dim").is_null()) c.explicit_head_dim = 0;
  read_int(j, where, "head_dim", c.explicit_head_dim);
  if (j.contains("head_dim") && !j.at("head_dim").is_null() && c.explicit_head_dim <= 0)
    throw ConfigError(str(where, ": head_dim = ", c.explicit_head_dim,
                          " must be positive (or null: hidden_size / num_attention_heads)"));
  c.tie_word_embeddings = false;
  c.initializer_range = 0.02;
  read_int(j, where, "hidden_size", c.hidden_size);
  read_int(j, where, "intermediate_size", c.intermediate_size);
  read_int(j, where, "num_hidden_layers", c.num_hidden_layers);
  read_int(j, where, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  read_int(j, where, "num_key_value_heads", c.num_key_value_heads);
  read_int(j, where, "vocab_size", c.vocab_size);
  read_double(j, where, "rms_norm_eps", c.rms_norm_eps);
  read_double(j, where, "rope_theta", c.rope_theta);
  read_int(j, where, "max_position_embeddings", c.max_position_embeddings);
  read_bool(j, where, "tie_word_embeddings", c.tie_word_embeddings);
  read_double(j, where, "initializer_range", c.initializer_range);
  if (const json* v = field(j, "rope_scaling")) c.rope_scaling = rope_scaling_from_json(*v, where);
  read_rope_parameters(j, where, c);
  if (arch == Arch::kQwen2 || arch == Arch::kQwen3) read_qwen_window(j, where, c);
  if (arch == Arch::kMistral) check_mistral_layer_types(j, where, c);
  // Phi-3's longrope configs give the original context at the top level.
  if (const json* v = field(j, "original_max_position_embeddings")) {
    int64_t original = 0;
    read_int(j, where, "original_max_position_embeddings", original);
    if (c.rope_scaling.type != RopeType::kLongrope)
      throw ConfigError(str(where, ": original_max_position_embeddings = ", v->dump(),
                            " at the top level is longrope's; give it inside rope_scaling"));
    if (c.rope_scaling.original_max_position_embeddings == 0)
      c.rope_scaling.original_max_position_embeddings = original;
  }
  reject_unsupported(j, where, c);
  return c;
}

}  // namespace

// Each torch_dtype value memo reads, with the dtype it names.
constexpr std::pair<const char*, DType> kTorchDtypes[] = {
    {"float32", DType::kF32}, {"bfloat16", DType::kBF16}, {"float16", DType::kF16}};

std::optional<DType> torch_dtype_from_json(const json& j, std::string_view where) {
  const char* name = field(j, "torch_dtype") ? "torch_dtype" : "dtype";
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  for (const auto& [text, dtype] : kTorchDtypes)
    if (*v == text) return dtype;
  throw ConfigError(str(where, ": ", name, " = ", v->dump(),
                        " is not one memo reads (\"float32\", \"bfloat16\", \"float16\")"));
}

const char* torch_dtype_name(DType dtype) {
  for (const auto& [text, d] : kTorchDtypes)
    if (d == dtype) return text;
  throw ConfigError(str("dtype ", dtype_name(dtype), " has no torch_dtype name memo writes"));
}

ModelConfig model_config_from_json(const json& j, std::string_view where) {
  if (!j.is_object())
    throw ConfigError(str(where, ": a model config must be a JSON object, got ", j.type_name()));
  torch_dtype_from_json(j, where);  // the stored weights' dtype: checked here, read by the loader
  const json* type = field(j, "model_type");
  if (type && *type != "llama" && *type != "gpt2" && *type != "qwen2" && *type != "qwen3" &&
      *type != "mistral")
    throw ConfigError(str(where, ": model_type = ", type->dump(),
                          " is not supported; memo reads \"llama\", \"qwen2\", \"qwen3\", "
                          "\"mistral\" and \"gpt2\" configs"));
  ModelConfig c = type && *type == "gpt2"      ? gpt2_config_from_json(j, where)
                  : type && *type == "qwen2"   ? llama_config_from_json(j, where, Arch::kQwen2)
                  : type && *type == "qwen3"   ? llama_config_from_json(j, where, Arch::kQwen3)
                  : type && *type == "mistral" ? llama_config_from_json(j, where, Arch::kMistral)
                                               : llama_config_from_json(j, where, Arch::kLlama);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(str(where, ": ", e.what()));
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return model_config_from_json(read_json_file<ConfigError>(path), path.string());
}

json model_config_to_json(const ModelConfig& c, DType torch_dtype) {
  if (c.is_gpt2()) {
    json j{
        {"architectures", json::array({"GPT2LMHeadModel"})},
        {"model_type", "gpt2"},
        {"activation_function", "gelu_new"},
        {"torch_dtype", torch_dtype_name(torch_dtype)},
        {"n_embd", c.hidden_size},
        {"n_layer", c.num_hidden_layers},
        {"n_head", c.num_attention_heads},
        {"n_inner", c.intermediate_size},
        {"n_positions", c.max_position_embeddings},
        {"n_ctx", c.max_position_embeddings},
        {"vocab_size", c.vocab_size},
        {"layer_norm_epsilon", c.rms_norm_eps},
        {"initializer_range", c.initializer_range},
        {"tie_word_embeddings", true},
        {"scale_attn_weights", true},
        {"scale_attn_by_inverse_layer_idx", false},
        {"reorder_and_upcast_attn", false},
        {"embd_pdrop", 0.0},  // memo trains without dropout
        {"attn_pdrop", 0.0},
        {"resid_pdrop", 0.0},
        {kMemoPositionField, c.uses_rope() ? "rope" : "learned"},
    };
    if (c.uses_rope()) j["rope_theta"] = c.rope_theta;
    return j;
  }
  const bool qwen2 = c.arch == Arch::kQwen2, mistral = c.arch == Arch::kMistral,
             qwen3 = c.arch == Arch::kQwen3;
  json j{
      {"architectures", json::array({qwen2     ? "Qwen2ForCausalLM"
                                     : qwen3   ? "Qwen3ForCausalLM"
                                     : mistral ? "MistralForCausalLM"
                                               : "LlamaForCausalLM"})},
      {"model_type", qwen2     ? "qwen2"
                     : qwen3   ? "qwen3"
                     : mistral ? "mistral"
                               : "llama"},
      {"hidden_act", "silu"},
      {"torch_dtype", torch_dtype_name(torch_dtype)},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"vocab_size", c.vocab_size},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"max_position_embeddings", c.max_position_embeddings},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"initializer_range", c.initializer_range},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
  };
  // Qwen3Config's head_dim defaults to 128, not C / H: always written there
  if (c.explicit_head_dim > 0 || qwen3) j["head_dim"] = c.head_dim();
  if (!c.rope_scaling.is_default()) j["rope_scaling"] = rope_scaling_to_json(c.rope_scaling);
  // transformers 4's longrope reads the original context at the top level only (Phi-3's place),
  // else takes max_position_embeddings for it; 5 reads rope_scaling's
  if (c.rope_scaling.type == RopeType::kLongrope &&
      c.rope_scaling.original_max_position_embeddings > 0)
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  if (qwen2 || mistral) j.erase("attention_bias");  // Qwen2's q/k/v biases are implied
  if (qwen2 || mistral || qwen3) j.erase("mlp_bias");
  if ((qwen2 || qwen3) && c.sliding_window == 0) j["use_sliding_window"] = false;
  if ((qwen2 || qwen3) && c.sliding_window > 0) {
    // layer_types for transformers 5; max_window_layers, the first layer that windows, for the
    // releases that predate layer_types (right where the windowed layers are the top ones)
    j["use_sliding_window"] = true;
    j["sliding_window"] = c.sliding_window;
    json types = json::array();
    int64_t first = -1;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const bool windowed = c.layer_window(l) > 0;
      if (windowed && first < 0) first = l;
      types.push_back(windowed ? "sliding_attention" : "full_attention");
    }
    j["max_window_layers"] = first;
    j["layer_types"] = std::move(types);
  }
  if (mistral) j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  return j;
}

void save_model_config(const std::filesystem::path& path, const ModelConfig& config,
                       DType torch_dtype) {
  write_file_atomic(path, model_config_to_json(config, torch_dtype).dump(2) + "\n");
}

}  // namespace memo
