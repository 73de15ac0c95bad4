#include "memo/model/params.h"

#include <cmath>

#include "memo/core/error.h"
#include "memo/core/random.h"

namespace memo {

ParamLayout::ParamLayout(const ModelConfig& config) {
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const int64_t QD = config.num_attention_heads * config.head_dim(), KD = config.kv_dim();
  add("model.embed_tokens.weight", {V, C});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {C});
    add(p + "self_attn.q_proj.weight", {QD, C});
    add(p + "self_attn.k_proj.weight", {KD, C});
    add(p + "self_attn.v_proj.weight", {KD, C});
    add(p + "self_attn.o_proj.weight", {C, QD});
    add(p + "post_attention_layernorm.weight", {C});
    add(p + "mlp.gate_proj.weight", {F, C});
    add(p + "mlp.up_proj.weight", {F, C});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  if (!config.tie_word_embeddings) add("lm_head.weight", {V, C});
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  params_.push_back(ParamInfo{std::move(name), std::move(shape), total_numel_, n});
  constexpr int64_t kAlignFloats = 16;  // 64 bytes: every tensor starts on a cache line
  total_numel_ += (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

int64_t ParamLayout::count() const {
  int64_t n = 0;
  for (const ParamInfo& p : params_) n += p.numel;
  return n;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw ConfigError(str("no parameter named '", name, "' in this model"));
}

ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, float* base) {
  auto view = [&](const std::string& name) {
    const ParamInfo& p = layout.find(name);
    Shape s;
    for (int64_t d : p.shape) s.dims[s.ndim++] = d;
    return Tensor(base + p.offset, s);
  };
  ModelWeights w;
  w.embed = view("model.embed_tokens.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.layers.push_back(LayerWeights{
        view(p + "input_layernorm.weight"), view(p + "self_attn.q_proj.weight"),
        view(p + "self_attn.k_proj.weight"), view(p + "self_attn.v_proj.weight"),
        view(p + "self_attn.o_proj.weight"), view(p + "post_attention_layernorm.weight"),
        view(p + "mlp.gate_proj.weight"), view(p + "mlp.up_proj.weight"),
        view(p + "mlp.down_proj.weight")});
  }
  w.norm = view("model.norm.weight");
  w.head = config.tie_word_embeddings ? w.embed : view("lm_head.weight");
  return w;
}

void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed) {
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    float* w = base + p.offset;
    if (!p.is_matrix()) {  // RMSNorm weights start at one
      for (int64_t j = 0; j < p.numel; ++j) w[j] = 1.0f;
      continue;
    }
    NormalStream rng(seed, i);
    for (int64_t j = 0; j < p.numel; ++j) w[j] = float(std * rng.next());
  }
}

}  // namespace memo
