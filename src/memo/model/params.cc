#include "memo/model/params.h"

#include <cmath>

#include "memo/core/error.h"
#include "memo/core/random.h"

namespace memo {

ParamLayout::ParamLayout(const ModelConfig& config) {
  if (config.is_gpt2()) {
    add_gpt2(config);
    return;
  }
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const int64_t QD = config.num_attention_heads * config.head_dim(), KD = config.kv_dim();
  add("model.embed_tokens.weight", {V, C}, ParamInit::kNormal);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {C}, ParamInit::kOne);
    add(p + "self_attn.q_proj.weight", {QD, C}, ParamInit::kNormal);
    add(p + "self_attn.k_proj.weight", {KD, C}, ParamInit::kNormal);
    add(p + "self_attn.v_proj.weight", {KD, C}, ParamInit::kNormal);
    add(p + "self_attn.o_proj.weight", {C, QD}, ParamInit::kNormal);
    add(p + "post_attention_layernorm.weight", {C}, ParamInit::kOne);
    add(p + "mlp.gate_proj.weight", {F, C}, ParamInit::kNormal);
    add(p + "mlp.up_proj.weight", {F, C}, ParamInit::kNormal);
    add(p + "mlp.down_proj.weight", {C, F}, ParamInit::kNormal);
  }
  add("model.norm.weight", {C}, ParamInit::kOne);
  if (!config.tie_word_embeddings) add("lm_head.weight", {V, C}, ParamInit::kNormal);
}

// Hugging Face GPT2LMHeadModel's tensors in its order and Conv1D layout ([in, out]); no
// lm_head.weight: the head is wte.
void ParamLayout::add_gpt2(const ModelConfig& config) {
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const double proj_scale = 1.0 / std::sqrt(2.0 * double(config.num_hidden_layers));
  add("transformer.wte.weight", {V, C}, ParamInit::kNormal);
  if (!config.uses_rope())
    add("transformer.wpe.weight", {config.max_position_embeddings, C}, ParamInit::kNormal);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    add(p + "ln_1.weight", {C}, ParamInit::kOne);
    add(p + "ln_1.bias", {C}, ParamInit::kZero);
    add(p + "attn.c_attn.weight", {C, 3 * C}, ParamInit::kNormal);
    add(p + "attn.c_attn.bias", {3 * C}, ParamInit::kZero);
    add(p + "attn.c_proj.weight", {C, C}, ParamInit::kNormal, proj_scale);
    add(p + "attn.c_proj.bias", {C}, ParamInit::kZero);
    add(p + "ln_2.weight", {C}, ParamInit::kOne);
    add(p + "ln_2.bias", {C}, ParamInit::kZero);
    add(p + "mlp.c_fc.weight", {C, F}, ParamInit::kNormal);
    add(p + "mlp.c_fc.bias", {F}, ParamInit::kZero);
    add(p + "mlp.c_proj.weight", {F, C}, ParamInit::kNormal, proj_scale);
    add(p + "mlp.c_proj.bias", {C}, ParamInit::kZero);
  }
  add("transformer.ln_f.weight", {C}, ParamInit::kOne);
  add("transformer.ln_f.bias", {C}, ParamInit::kZero);
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape, ParamInit init,
                      double std_scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  params_.push_back(ParamInfo{std::move(name), std::move(shape), total_numel_, n, init, std_scale});
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
  if (config.is_gpt2()) {
    w.embed = view("transformer.wte.weight");
    if (!config.uses_rope()) w.pos = view("transformer.wpe.weight");
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      LayerWeights l;
      l.ln1 = view(p + "ln_1.weight");
      l.ln1_b = view(p + "ln_1.bias");
      l.w_qkv = view(p + "attn.c_attn.weight");
      l.b_qkv = view(p + "attn.c_attn.bias");
      l.w_attn_o = view(p + "attn.c_proj.weight");
      l.b_attn_o = view(p + "attn.c_proj.bias");
      l.ln2 = view(p + "ln_2.weight");
      l.ln2_b = view(p + "ln_2.bias");
      l.w_fc = view(p + "mlp.c_fc.weight");
      l.b_fc = view(p + "mlp.c_fc.bias");
      l.w_mlp_o = view(p + "mlp.c_proj.weight");
      l.b_mlp_o = view(p + "mlp.c_proj.bias");
      w.layers.push_back(l);
    }
    w.norm = view("transformer.ln_f.weight");
    w.norm_b = view("transformer.ln_f.bias");
    w.head = w.embed;
    return w;
  }
  w.embed = view("model.embed_tokens.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.ln1 = view(p + "input_layernorm.weight");
    l.wq = view(p + "self_attn.q_proj.weight");
    l.wk = view(p + "self_attn.k_proj.weight");
    l.wv = view(p + "self_attn.v_proj.weight");
    l.wo = view(p + "self_attn.o_proj.weight");
    l.ln2 = view(p + "post_attention_layernorm.weight");
    l.wg = view(p + "mlp.gate_proj.weight");
    l.wu = view(p + "mlp.up_proj.weight");
    l.wd = view(p + "mlp.down_proj.weight");
    w.layers.push_back(l);
  }
  w.norm = view("model.norm.weight");
  w.head = config.tie_word_embeddings ? w.embed : view("lm_head.weight");
  return w;
}

void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed) {
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    float* w = base + p.offset;
    if (p.init != ParamInit::kNormal) {  // norm weights start at one, biases at zero
      const float value = p.init == ParamInit::kOne ? 1.0f : 0.0f;
      for (int64_t j = 0; j < p.numel; ++j) w[j] = value;
      continue;
    }
    NormalStream rng(seed, i);
    const double s = std * p.init_std_scale;
    for (int64_t j = 0; j < p.numel; ++j) w[j] = float(s * rng.next());
  }
}

}  // namespace memo
