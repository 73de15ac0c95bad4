#include "memo/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "memo/core/error.h"

namespace memo {

int64_t ModelConfig::max_positions() const {
  if (!uses_rope()) return max_position_embeddings;
  if (rope_scaling.type == RopeType::kDynamic)
    return int64_t(std::floor(rope_scaling.factor * double(max_position_embeddings)));
  if (rope_scaling.type == RopeType::kYarn)
    return std::max(max_position_embeddings,
                    int64_t(std::floor(rope_scaling.factor * double(yarn_original_positions()))));
  return max_position_embeddings;
}

int64_t ModelConfig::yarn_original_positions() const {
  return rope_scaling.original_max_position_embeddings > 0
             ? rope_scaling.original_max_position_embeddings
             : max_position_embeddings;
}

std::string ModelConfig::positions_limit() const {
  if (max_positions() == max_position_embeddings)
    return str(positions_field(), " = ", max_position_embeddings);
  if (rope_scaling.type == RopeType::kYarn)
    return str(
        max_positions(), " positions (rope_scaling yarn: factor ", rope_scaling.factor, " x ",
        rope_scaling.original_max_position_embeddings > 0 ? "original_max_position_embeddings"
                                                          : "max_position_embeddings",
        " = ", yarn_original_positions(), ")");
  return str(max_positions(), " positions (rope_scaling dynamic: factor ", rope_scaling.factor,
             " x max_position_embeddings = ", max_position_embeddings, ")");
}

void ModelConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v <= 0) throw ConfigError(str(field, " = ", v, " must be positive"));
  };
  const bool gpt = is_gpt2();  // name the fields as the config.json does (GPT2Config names)
  positive(gpt ? "n_embd" : "hidden_size", hidden_size);
  positive(gpt ? "n_inner" : "intermediate_size", intermediate_size);
  positive(gpt ? "n_layer" : "num_hidden_layers", num_hidden_layers);
  positive(gpt ? "n_head" : "num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("vocab_size", vocab_size);
  positive(positions_field(), max_position_embeddings);
  check_sizes();
  if (explicit_head_dim < 0 || (explicit_head_dim > 0 && !is_llama_family()))
    throw ConfigError(str("head_dim = ", explicit_head_dim,
                          " is LLaMA's (positive, or absent: hidden_size / num_attention_heads)"));
  if (explicit_head_dim == 0 && hidden_size % num_attention_heads != 0)
    throw ConfigError(str(gpt ? "n_embd = " : "hidden_size = ", hidden_size,
                          " is not divisible by ",
                          gpt ? "n_head = " : "num_attention_heads = ", num_attention_heads, "; ",
                          gpt ? "n_embd" : "hidden_size", " must be a multiple of it (e.g. ",
                          (hidden_size / num_attention_heads + 1) * num_attention_heads, ")",
                          gpt ? "" : " or head_dim given"));
  if (is_llama_family() && !uses_rope())
    throw ConfigError(
        "a LLaMA config has rotary position embeddings only (learned ones are GPT-2's)");
  if (uses_rope() && head_dim() % 2 != 0)
    throw ConfigError(str(explicit_head_dim > 0 ? "head_dim = "
                          : gpt                 ? "the head dim n_embd / n_head = "
                                                : "head_dim = hidden_size / num_attention_heads = ",
                          head_dim(), " must be even for rotary embeddings"));
  if (attention_bias && arch != Arch::kLlama && arch != Arch::kQwen3)
    throw ConfigError("attention_bias is LLaMA's and Qwen3's (Qwen2's q/k/v biases are implied)");
  if (mlp_bias && arch != Arch::kLlama) throw ConfigError("mlp_bias is LLaMA's");
  if (is_gpt2()) {
    if (num_key_value_heads != num_attention_heads)
      throw ConfigError(str("GPT-2 has multi-head attention: num_key_value_heads = ",
                            num_key_value_heads, " must equal n_head = ", num_attention_heads));
    if (!tie_word_embeddings)
      throw ConfigError("GPT-2 ties its head to wte: tie_word_embeddings must be true");
  }
  if (num_attention_heads % num_key_value_heads != 0)
    throw ConfigError(str("num_key_value_heads = ", num_key_value_heads,
                          " must divide num_attention_heads = ", num_attention_heads));
  // No upper bound on vocab_size: ids are int32 throughout, and token files carry their own width
  // (data/token_data.h checks each file's ids, and a uint16 file against its tokenizer).
  if (vocab_size > std::numeric_limits<int32_t>::max())
    throw ConfigError(str("vocab_size = ", vocab_size, " is over ",
                          std::numeric_limits<int32_t>::max(), ", the most int32 token ids hold"));
  // finite too: a JSON file cannot hold inf, so a saved config would not read back
  if (!(rms_norm_eps > 0 && std::isfinite(rms_norm_eps)))
    throw ConfigError(str(is_gpt2() ? "layer_norm_epsilon = " : "rms_norm_eps = ", rms_norm_eps,
                          " must be positive and finite"));
  if (!(rope_theta > 0 && std::isfinite(rope_theta)))
    throw ConfigError(str("rope_theta = ", rope_theta, " must be positive and finite"));
  if (!rope_scaling.is_default() && !(is_llama_family() && uses_rope()))
    throw ConfigError("rope_scaling is LLaMA's; memo's GPT-2 rotates with plain RoPE only");
  if (uses_rope()) validate_rope_scaling(rope_scaling, head_dim(), max_position_embeddings);
  if (sliding_window < 0 || (sliding_window > 0 && arch != Arch::kMistral && arch != Arch::kQwen2 &&
                             arch != Arch::kQwen3))
    throw ConfigError(str("sliding_window = ", sliding_window,
                          " is Mistral's, Qwen2's and Qwen3's (positive, or null)"));
  if (!sliding_layers.empty() && (sliding_window == 0 || arch == Arch::kMistral ||
                                  int64_t(sliding_layers.size()) != num_hidden_layers))
    throw ConfigError(str("layer_types names ", sliding_layers.size(), " layers for ",
                          num_hidden_layers, " layers with sliding_window = ", sliding_window,
                          "; it is Qwen2's and Qwen3's, one entry a layer"));
  if (!(initializer_range > 0 && std::isfinite(initializer_range)))
    throw ConfigError(
        str("initializer_range = ", initializer_range, " must be positive and finite"));
}

// Note [Sizes a config may ask for]
// Every count memo derives from a config (elements, bytes, a layer's offsets) is int64, and the
// host keeps a few structures per layer. So the fields are bounded before anything is sized from
// them: each dimension to int32 (like vocab_size), layers to kMaxLayers, positions (dynamic RoPE's
// factor included) to 2^40, and the parameter count, computed in long double, to 2^50 (1e15: its
// bytes, gradients and optimiser state stay far inside int64). A config past them is a damaged or
// mistyped file, refused by field.
void ModelConfig::check_sizes() const {
  const bool gpt = is_gpt2();
  constexpr int64_t kInt32 = std::numeric_limits<int32_t>::max();
  auto at_most = [](const char* field, int64_t v, int64_t limit, const char* why) {
    if (v > limit) throw ConfigError(str(field, " = ", v, " is over ", limit, why));
  };
  at_most(gpt ? "n_embd" : "hidden_size", hidden_size, kInt32, "");
  at_most(gpt ? "n_inner" : "intermediate_size", intermediate_size, kInt32, "");
  at_most(gpt ? "n_head" : "num_attention_heads", num_attention_heads, kInt32, "");
  at_most("num_key_value_heads", num_key_value_heads, kInt32, "");
  at_most("head_dim", explicit_head_dim, kInt32, "");
  at_most(gpt ? "n_layer" : "num_hidden_layers", num_hidden_layers, kMaxLayers,
          " (memo's limit; the deepest published models have a few hundred)");
  at_most(positions_field(), max_position_embeddings, int64_t(1) << 40, " (2^40 tokens)");
  if (uses_rope() && rope_scaling.type == RopeType::kDynamic &&
      !(rope_scaling.factor * double(max_position_embeddings) <= std::ldexp(1.0, 40)))
    throw ConfigError(str("rope_scaling dynamic: factor ", rope_scaling.factor, " x ",
                          positions_field(), " = ", max_position_embeddings,
                          " positions is over 2^40 tokens"));
  if (uses_rope() && rope_scaling.type == RopeType::kYarn &&
      !(rope_scaling.factor * double(yarn_original_positions()) <= std::ldexp(1.0, 40)))
    throw ConfigError(str("rope_scaling yarn: factor ", rope_scaling.factor, " x its original ",
                          yarn_original_positions(), " positions is over 2^40 tokens"));
  // each factor is within int32 here, so head_dim() and kv_dim() hold their products
  const long double C = hidden_size, F = intermediate_size, V = vocab_size,
                    HD = (long double)num_attention_heads * head_dim(), KV = kv_dim();
  const long double per_layer = C * (2 * HD + 2 * KV) + 3 * C * F + 4 * C;
  const long double total =
      num_hidden_layers * per_layer + 2 * V * C + (uses_rope() ? 0 : max_position_embeddings * C);
  if (!(total <= std::ldexp(1.0L, 50)))
    throw ConfigError(str("the config asks for about ", double(total),
                          " parameters, over 2^50 (1e15); check its sizes"));
}

std::string ModelConfig::window_summary() const {
  if (sliding_window == 0) return "";
  int64_t windowed = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) windowed += layer_window(l) > 0;
  return windowed == num_hidden_layers ? str(", sliding window ", sliding_window, " on every layer")
                                       : str(", sliding window ", sliding_window, " on ", windowed,
                                             " of ", num_hidden_layers, " layers");
}

ModelConfig PositionOverrides::applied_to(ModelConfig c) const {
  // learned positions (GPT-2's wpe) have no rotation to change, and a table of n_positions rows
  if (!c.uses_rope() && (rope_theta || max_position_embeddings))
    throw ConfigError(str(rope_theta ? "rope_theta" : "max_position_embeddings",
                          ": the model has learned positions (a table of ", c.positions_field(),
                          " = ", c.max_position_embeddings, " rows), not RoPE; it cannot be ",
                          rope_theta ? "rotated otherwise" : "given other positions"));
  if (rope_theta) c.rope_theta = *rope_theta;
  if (rope_scaling) c.rope_scaling = *rope_scaling;
  if (max_position_embeddings) c.max_position_embeddings = *max_position_embeddings;
  c.validate();
  return c;
}

}  // namespace memo
