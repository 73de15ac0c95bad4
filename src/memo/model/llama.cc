// The LLaMA decoder layer (Hugging Face LlamaDecoderLayer): RMSNorm, causal GQA self-attention with
// RoPE, residual, RMSNorm, SwiGLU MLP, residual; no biases, Linear weights [out, in] (y = x W^T).
// The final norm is an RMSNorm, the head lm_head or the tied embedding. Forward and backward are
// straight lists of kernel calls in the order of the math; the per-token products go through
// matmul_token_panels so recompute_tokens can rebuild any panel-aligned token range exactly (the
// down projection is never rebuilt and takes one call).
#include <string>

#include "memo/model/architecture.h"
#include "memo/model/named_views.h"

namespace memo {
namespace {

// One layer's tensors, in Hugging Face's order.
struct Weights {
  Tensor ln1;  // [C]          input_layernorm
  Tensor wq;   // [H*D, C]     q_proj
  Tensor wk;   // [Hkv*D, C]   k_proj
  Tensor wv;   // [Hkv*D, C]   v_proj
  Tensor wo;   // [C, H*D]     o_proj
  Tensor ln2;  // [C]          post_attention_layernorm
  Tensor wg;   // [F, C]       gate_proj
  Tensor wu;   // [F, C]       up_proj
  Tensor wd;   // [C, F]       down_proj
};
constexpr Tensor Weights::*kWeights[] = {&Weights::ln1, &Weights::wq, &Weights::wk,
                                         &Weights::wv,  &Weights::wo, &Weights::ln2,
                                         &Weights::wg,  &Weights::wu, &Weights::wd};

// What backward reads; shapes per micro-batch, T = B*S tokens. Every field except x is written by
// forward; x is the layer input, written by whoever produced it.
struct Saved {
  Tensor x;         // [T, C]     layer input: starts every recompute; always offloaded
  Tensor xn1;       // [T, C]     input_layernorm(x)
  Tensor inv_rms1;  // [T]        1/rms of x, for the norm's backward
  Tensor q;         // [T, H*D]   queries after RoPE
  Tensor k;         // [T, Hkv*D] keys after RoPE
  Tensor v;         // [T, Hkv*D] values
  Tensor attn;      // [T, H*D]   attention output: O(S^2) to rebuild, never recomputed
  Tensor lse;       // [B, H, S]  attention log-sum-exp, travels with attn
  Tensor h;         // [T, C]     residual stream after attention: x + attn o_proj
  Tensor xn2;       // [T, C]     post_attention_layernorm(h)
  Tensor inv_rms2;  // [T]
  Tensor gate;      // [T, F]     gate_proj(xn2)
  Tensor up;        // [T, F]     up_proj(xn2)
  Tensor act;       // [T, F]     silu(gate) * up
};
constexpr SavedSpec<Saved> kSaved[] = {
    {"x", &Saved::x, SavedWidth::kHidden, false},
    {"xn1", &Saved::xn1, SavedWidth::kHidden, true},
    {"inv_rms1", &Saved::inv_rms1, SavedWidth::kToken, true},
    {"q", &Saved::q, SavedWidth::kQuery, true},
    {"k", &Saved::k, SavedWidth::kKv, true},
    {"v", &Saved::v, SavedWidth::kKv, true},
    {"attn", &Saved::attn, SavedWidth::kQuery, false},
    {"lse", &Saved::lse, SavedWidth::kHeads, false},
    {"h", &Saved::h, SavedWidth::kHidden, true},
    {"xn2", &Saved::xn2, SavedWidth::kHidden, true},
    {"inv_rms2", &Saved::inv_rms2, SavedWidth::kToken, true},
    {"gate", &Saved::gate, SavedWidth::kFfn, true},
    {"up", &Saved::up, SavedWidth::kFfn, true},
    {"act", &Saved::act, SavedWidth::kFfn, true},
};

class Llama final : public Architecture {
 public:
  std::string_view name() const override { return "llama"; }
  std::vector<ParamInfo> params(const ModelConfig& config) const override;
  std::vector<SkeletalField> skeletal_fields(const ModelConfig& config,
                                             DType activations) const override {
    return skeletal_fields_of(kSaved, config, activations);
  }
  int mlp_matrices() const override { return 3; }
  void forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
               const LayerContext& ctx) const override;
  void recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                        const LayerContext& ctx) const override;
  void backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                const LayerWeights& lw, const LayerContext& ctx) const override;
  Shape final_norm_stats_shape(int64_t tokens) const override { return {tokens}; }
  void final_norm_forward(Tensor xf, Tensor stats, ConstTensor x, const ModelWeights& w,
                          const ModelConfig& config, Backend& backend) const override {
    backend.rmsnorm_forward(xf, stats, x, w.norm, float(config.rms_norm_eps));
  }
  void final_norm_backward(Tensor dx, const ModelWeights& dw, ConstTensor dxf, ConstTensor x,
                           ConstTensor stats, const ModelWeights& w,
                           Backend& backend) const override {
    backend.rmsnorm_backward(dx, dw.norm, dxf, x, w.norm, stats);
  }
  void decode(const DecodeRows& r, const LayerWeights& lw, const ModelConfig& config,
              Backend& backend) const override;
};

std::vector<ParamInfo> Llama::params(const ModelConfig& config) const {
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const int64_t QD = config.num_attention_heads * config.head_dim(), KD = config.kv_dim();
  std::vector<ParamInfo> p;
  auto add = [&p](std::string name, std::vector<int64_t> shape, ParamInit init, ParamRole role,
                  int64_t layer = -1) {
    p.push_back(param_info(std::move(name), std::move(shape), init, role, layer));
  };
  add("model.embed_tokens.weight", {V, C}, ParamInit::kNormal, ParamRole::kEmbedding);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {  // in the order of kWeights
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const ParamRole r = ParamRole::kLayer;
    add(l + "input_layernorm.weight", {C}, ParamInit::kOne, r, i);
    add(l + "self_attn.q_proj.weight", {QD, C}, ParamInit::kNormal, r, i);
    add(l + "self_attn.k_proj.weight", {KD, C}, ParamInit::kNormal, r, i);
    add(l + "self_attn.v_proj.weight", {KD, C}, ParamInit::kNormal, r, i);
    add(l + "self_attn.o_proj.weight", {C, QD}, ParamInit::kNormal, r, i);
    add(l + "post_attention_layernorm.weight", {C}, ParamInit::kOne, r, i);
    add(l + "mlp.gate_proj.weight", {F, C}, ParamInit::kNormal, r, i);
    add(l + "mlp.up_proj.weight", {F, C}, ParamInit::kNormal, r, i);
    add(l + "mlp.down_proj.weight", {C, F}, ParamInit::kNormal, r, i);
  }
  add("model.norm.weight", {C}, ParamInit::kOne, ParamRole::kNorm);
  if (!config.tie_word_embeddings)
    add("lm_head.weight", {V, C}, ParamInit::kNormal, ParamRole::kHead);
  return p;
}

void Llama::forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
                    const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const float eps = float(cfg.rms_norm_eps);
  // attention block: h = x + o_proj(attn(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)))
  const int64_t T = ctx.batch * ctx.seq, C = cfg.hidden_size;
  ctx.backend->rmsnorm_forward(s.xn1, s.inv_rms1, s.x, w.ln1, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", s.xn1, ctx.act);
    ctx.backend->matmul_token_panels(s.q, s.xn1, w.wq);
    ctx.backend->matmul_token_panels(s.k, s.xn1, w.wk);
    ctx.backend->matmul_token_panels(s.v, s.xn1, w.wv);
  }
  layer_rope(s.q, 0, ctx, false);
  layer_rope(s.k, 0, ctx, false);
  layer_attention_forward(s.attn, s.lse, s.q, s.k, s.v, cfg.num_attention_heads,
                          cfg.num_key_value_heads, ctx);
  ctx.backend->copy(s.h, s.x);
  {
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.attn_out", T, C, ctx.act);
    ctx.backend->matmul_token_panels(s.h, s.attn, w.wo, 1.0f);
    partial.reduce_scatter(s.h);
  }
  // MLP block: y = h + down_proj(silu(gate_proj(xn2)) * up_proj(xn2))
  ctx.backend->rmsnorm_forward(s.xn2, s.inv_rms2, s.h, w.ln2, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", s.xn2, ctx.act);
    ctx.backend->matmul_token_panels(s.gate, s.xn2, w.wg);
    ctx.backend->matmul_token_panels(s.up, s.xn2, w.wu);
  }
  ctx.backend->swiglu_forward(s.act, s.gate, s.up);
  ctx.backend->copy(y, s.h);
  TpPartial partial(*ctx.alloc, ctx.tp, "tp.mlp_out", T, C, ctx.act);
  ctx.backend->matmul(y, s.act, w.wd, false, true, 1.0f, 1.0f);
  partial.reduce_scatter(y);
}

// forward without attention and the down projection, on rows [r0, r1) of each tensor.
void Llama::recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                             const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq;
  check_recompute_rows("llama recompute_tokens", r0, r1, T, ctx);
  if (r0 == r1) return;
  const float eps = float(cfg.rms_norm_eps);
  auto rows = [r0, r1](const Tensor& t) { return t.slice_rows(r0, r1); };
  // Under TP the rebuilt rows need the forward's collectives on those rows (Note [TP collectives])
  const int64_t C = cfg.hidden_size;
  ctx.backend->rmsnorm_forward(rows(s.xn1), rows(s.inv_rms1), rows(s.x), w.ln1, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", rows(s.xn1), ctx.act);
    ctx.backend->matmul_token_panels(rows(s.q), rows(s.xn1), w.wq);
    ctx.backend->matmul_token_panels(rows(s.k), rows(s.xn1), w.wk);
    ctx.backend->matmul_token_panels(rows(s.v), rows(s.xn1), w.wv);
  }
  layer_rope(rows(s.q), r0, ctx, false);
  layer_rope(rows(s.k), r0, ctx, false);
  ctx.backend->copy(rows(s.h), rows(s.x));
  {
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.attn_out", r1 - r0, C, ctx.act);
    ctx.backend->matmul_token_panels(rows(s.h), rows(s.attn), w.wo, 1.0f);
    partial.reduce_scatter(rows(s.h));
  }
  ctx.backend->rmsnorm_forward(rows(s.xn2), rows(s.inv_rms2), rows(s.h), w.ln2, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", rows(s.xn2), ctx.act);
    ctx.backend->matmul_token_panels(rows(s.gate), rows(s.xn2), w.wg);
    ctx.backend->matmul_token_panels(rows(s.up), rows(s.xn2), w.wu);
  }
  ctx.backend->swiglu_forward(rows(s.act), rows(s.gate), rows(s.up));
}

void Llama::backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                     const LayerWeights& lw, const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights), dw = bind_weights(ldw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq, C = cfg.hidden_size, F = cfg.intermediate_size;
  const int64_t D = cfg.head_dim(), QD = cfg.num_attention_heads * D, KD = cfg.kv_dim();
  ActivationAllocator& alloc = *ctx.alloc;
  // y = h + act Wd^T:  d act = dy Wd;  dWd += dy^T act;  dh = dy (+ the norm branch below)
  Tensor dact = alloc.acquire("mlp.dact", {T, F}, ActKind::kTransient, ctx.act);
  {
    const TpGather gathered(alloc, ctx.tp, "tp.mlp_dout", dres, ctx.act);
    ctx.backend->matmul(dact, dres, w.wd, false, false);
    ctx.backend->matmul(dw.wd, dres, s.act, true, false, 1.0f, 1.0f);
  }
  // act = silu(gate) * up
  Tensor dgate = alloc.acquire("mlp.dgate", {T, F}, ActKind::kTransient, ctx.act);
  Tensor dup = alloc.acquire("mlp.dup", {T, F}, ActKind::kTransient, ctx.act);
  ctx.backend->swiglu_backward(dgate, dup, dact, s.gate, s.up);
  alloc.release(dact);
  // gate = xn2 Wg^T, up = xn2 Wu^T
  Tensor dxn2 = alloc.acquire("mlp.dxn2", {T, C}, ActKind::kTransient, ctx.act);
  {
    TpPartial partial(alloc, ctx.tp, "tp.mlp_din", T, C, ctx.act);
    ctx.backend->matmul(dxn2, dgate, w.wg, false, false);
    ctx.backend->matmul(dxn2, dup, w.wu, false, false, 1.0f, 1.0f);
    partial.reduce_scatter(dxn2);
  }
  {
    const TpGather gathered(alloc, ctx.tp, "tp.mlp_in", s.xn2, ctx.act);
    ctx.backend->matmul(dw.wg, dgate, s.xn2, true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wu, dup, s.xn2, true, false, 1.0f, 1.0f);
  }
  alloc.release(dup);
  alloc.release(dgate);
  // xn2 = rmsnorm(h): dres becomes dL/dh
  ctx.backend->rmsnorm_backward(dres, dw.ln2, dxn2, s.h, w.ln2, s.inv_rms2);
  alloc.release(dxn2);
  // h = x + attn Wo^T:  d attn = dh Wo;  dWo += dh^T attn
  Tensor dattn = alloc.acquire("attn.dattn", {T, QD}, ActKind::kTransient, ctx.act);
  {
    const TpGather gathered(alloc, ctx.tp, "tp.attn_dout", dres, ctx.act);
    ctx.backend->matmul(dattn, dres, w.wo, false, false);
    ctx.backend->matmul(dw.wo, dres, s.attn, true, false, 1.0f, 1.0f);
  }
  // attention
  Tensor dq = alloc.acquire("attn.dq", {T, QD}, ActKind::kTransient, ctx.act);
  Tensor dk = alloc.acquire("attn.dk", {T, KD}, ActKind::kTransient, ctx.act);
  Tensor dv = alloc.acquire("attn.dv", {T, KD}, ActKind::kTransient, ctx.act);
  layer_attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse, cfg.num_attention_heads,
                           cfg.num_key_value_heads, ctx);
  alloc.release(dattn);
  layer_rope(dq, 0, ctx, true);
  layer_rope(dk, 0, ctx, true);
  // q, k, v = xn1 W^T
  Tensor dxn1 = alloc.acquire("attn.dxn1", {T, C}, ActKind::kTransient, ctx.act);
  {
    TpPartial partial(alloc, ctx.tp, "tp.attn_din", T, C, ctx.act);
    ctx.backend->matmul(dxn1, dq, w.wq, false, false);
    ctx.backend->matmul(dxn1, dk, w.wk, false, false, 1.0f, 1.0f);
    ctx.backend->matmul(dxn1, dv, w.wv, false, false, 1.0f, 1.0f);
    partial.reduce_scatter(dxn1);
  }
  {
    const TpGather gathered(alloc, ctx.tp, "tp.attn_in", s.xn1, ctx.act);
    ctx.backend->matmul(dw.wq, dq, s.xn1, true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wk, dk, s.xn1, true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wv, dv, s.xn1, true, false, 1.0f, 1.0f);
  }
  alloc.release(dv);
  alloc.release(dk);
  alloc.release(dq);
  // xn1 = rmsnorm(x): dres becomes dL/dx
  ctx.backend->rmsnorm_backward(dres, dw.ln1, dxn1, s.x, w.ln1, s.inv_rms1);
  alloc.release(dxn1);
}

// h = x + o_proj(attn(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)));
// y = h + down_proj(silu(gate_proj(xn2)) * up_proj(xn2)), on the decoded rows.
void Llama::decode(const DecodeRows& r, const LayerWeights& lw, const ModelConfig& config,
                   Backend& backend) const {
  const Weights w = bind_weights(lw, kWeights);
  const int64_t D = config.head_dim();
  const float eps = float(config.rms_norm_eps);
  backend.rmsnorm_forward(r.xn, r.rstd, r.x, w.ln1, eps);
  backend.matmul_token_panels(r.q, r.xn, w.wq);
  backend.matmul_token_panels(r.k, r.xn, w.wk);
  backend.matmul_token_panels(r.v, r.xn, w.wv);
  backend.rope_forward(r.q, r.rope_cos, r.rope_sin, D, r.position);
  backend.rope_forward(r.k, r.rope_cos, r.rope_sin, D, r.position);
  r.attend();
  backend.copy(r.h, r.x);
  backend.matmul_token_panels(r.h, r.attn, w.wo, 1.0f);
  backend.rmsnorm_forward(r.xn, r.rstd, r.h, w.ln2, eps);
  backend.matmul_token_panels(r.mlp_gate, r.xn, w.wg);
  backend.matmul_token_panels(r.mlp_in, r.xn, w.wu);
  backend.swiglu_forward(r.mlp_act, r.mlp_gate, r.mlp_in);
  backend.copy(r.x, r.h);
  backend.matmul(r.x, r.mlp_act, w.wd, false, true, 1.0f, 1.0f);
}

}  // namespace

const Architecture& llama_architecture() {
  static const Llama llama;
  return llama;
}

}  // namespace memo
