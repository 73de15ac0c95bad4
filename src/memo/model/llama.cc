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
  std::vector<SkeletalField> skeletal_fields(const ModelConfig& config, DType activations,
                                             int64_t tp) const override {
    return skeletal_fields_of(kSaved, config, activations, tp);
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
  // split: Note [Tensor-parallel parameters] (rows 0, columns 1, whole -1)
  auto add = [&p](std::string name, std::vector<int64_t> shape, ParamInit init, ParamRole role,
                  int64_t layer, int split) {
    p.push_back(param_info(std::move(name), std::move(shape), init, role, layer, 1.0, split));
    p.back().pad_split = role == ParamRole::kEmbedding || role == ParamRole::kHead;
  };
  add("model.embed_tokens.weight", {V, C}, ParamInit::kNormal, ParamRole::kEmbedding, -1, 0);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {  // in the order of kWeights
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const ParamRole r = ParamRole::kLayer;
    add(l + "input_layernorm.weight", {C}, ParamInit::kOne, r, i, -1);
    add(l + "self_attn.q_proj.weight", {QD, C}, ParamInit::kNormal, r, i, 0);
    add(l + "self_attn.k_proj.weight", {KD, C}, ParamInit::kNormal, r, i, 0);
    add(l + "self_attn.v_proj.weight", {KD, C}, ParamInit::kNormal, r, i, 0);
    add(l + "self_attn.o_proj.weight", {C, QD}, ParamInit::kNormal, r, i, 1);
    add(l + "post_attention_layernorm.weight", {C}, ParamInit::kOne, r, i, -1);
    add(l + "mlp.gate_proj.weight", {F, C}, ParamInit::kNormal, r, i, 0);
    add(l + "mlp.up_proj.weight", {F, C}, ParamInit::kNormal, r, i, 0);
    add(l + "mlp.down_proj.weight", {C, F}, ParamInit::kNormal, r, i, 1);
  }
  add("model.norm.weight", {C}, ParamInit::kOne, ParamRole::kNorm, -1, -1);
  if (!config.tie_word_embeddings)
    add("lm_head.weight", {V, C}, ParamInit::kNormal, ParamRole::kHead, -1, 0);
  return p;
}

// Tensor parallelism (Note [Tensor-parallel activations] in model/parallel.h): t ranks, x and the
// norms' tensors hold T/t rows, the heads' and units' tensors all T; without it t = 1 and every
// TpGather / TpPartial is the tensor itself.
int64_t tp_ranks(const LayerContext& ctx) { return ctx.tp ? ctx.tp->size() : 1; }

// y = residual + a w^T, the row-parallel product: under tensor parallelism the partial sums of the
// group's rows, reduce-scattered to this rank's, then the residual added; otherwise one product
// into y with the residual as its start (bit for bit the one-process layer). Token panels when
// `panels` (products a rebuild repeats on some of the rows).
void row_parallel_residual(Tensor y, ConstTensor residual, ConstTensor a, ConstTensor w,
                           const char* name, bool panels, const LayerContext& ctx) {
  Backend& be = *ctx.backend;
  if (!ctx.tp) {
    be.copy(y, residual);
    if (panels)
      be.matmul_token_panels(y, a, w, 1.0f);
    else
      be.matmul(y, a, w, false, true, 1.0f, 1.0f);
    return;
  }
  TpPartial partial(*ctx.alloc, ctx.tp, name, y.rows(), y.cols(), ctx.act);
  const Tensor sums = partial.sums_into(y);
  if (panels)
    be.matmul_token_panels(sums, a, w);
  else
    be.matmul(sums, a, w, false, true);
  partial.reduce_scatter(y);
  be.add_into(y, residual);
}

void Llama::forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
                    const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const float eps = float(cfg.rms_norm_eps);
  const int64_t t = tp_ranks(ctx);
  // attention block: h = x + o_proj(attn(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)))
  ctx.backend->rmsnorm_forward(s.xn1, s.inv_rms1, s.x, w.ln1, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", s.xn1, ctx.act);
    ctx.backend->matmul_token_panels(s.q, gathered.rows(), w.wq);
    ctx.backend->matmul_token_panels(s.k, gathered.rows(), w.wk);
    ctx.backend->matmul_token_panels(s.v, gathered.rows(), w.wv);
  }
  layer_rope(s.q, 0, ctx, false);
  layer_rope(s.k, 0, ctx, false);
  layer_attention_forward(s.attn, s.lse, s.q, s.k, s.v, cfg.num_attention_heads / t,
                          cfg.num_key_value_heads / t, ctx);
  row_parallel_residual(s.h, s.x, s.attn, w.wo, "tp.attn_out", true, ctx);
  // MLP block: y = h + down_proj(silu(gate_proj(xn2)) * up_proj(xn2))
  ctx.backend->rmsnorm_forward(s.xn2, s.inv_rms2, s.h, w.ln2, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", s.xn2, ctx.act);
    ctx.backend->matmul_token_panels(s.gate, gathered.rows(), w.wg);
    ctx.backend->matmul_token_panels(s.up, gathered.rows(), w.wu);
  }
  ctx.backend->swiglu_forward(s.act, s.gate, s.up);
  row_parallel_residual(y, s.h, s.act, w.wd, "tp.mlp_out", false, ctx);
}

// forward without attention and the down projection, on rows [r0, r1) of each tensor: of the
// rank's T/t rows, and of every group of T/t in the T-row tensors under tensor parallelism.
void Llama::recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                             const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const int64_t Tl = s.x.rows(), t = tp_ranks(ctx), n = r1 - r0;
  check_recompute_rows("llama recompute_tokens", r0, r1, Tl, ctx);
  // Under tensor parallelism the collectives' buffers are held for all Tl rows whatever the range,
  // empty included, so the requests a plan traced do not depend on alpha.
  if (r0 == r1 && !ctx.tp) return;
  const int64_t g = ctx.backend->reproducible_rows();
  MEMO_CHECK(t == 1 || n == 0 || g == 0 || Tl % g == 0,
             "llama recompute_tokens: under tensor parallelism ", "the rank's ", Tl,
             " token rows must be a multiple of the backend's ", g, " reproducible rows");
  const float eps = float(cfg.rms_norm_eps);
  auto rows = [r0, r1](const Tensor& x) { return x.slice_rows(r0, r1); };
  // group k of a T-row tensor: the tokens of rank k's rows [r0, r1)
  auto group = [&](const Tensor& x, int64_t k) { return x.slice_rows(k * Tl + r0, k * Tl + r1); };
  auto group_of = [n](ConstTensor gathered, int64_t k) {
    return gathered.slice_rows(k * n, (k + 1) * n);
  };
  if (n > 0) ctx.backend->rmsnorm_forward(rows(s.xn1), rows(s.inv_rms1), rows(s.x), w.ln1, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", rows(s.xn1), ctx.act, Tl);
    for (int64_t k = 0; k < t && n > 0; ++k) {
      const ConstTensor in = group_of(gathered.rows(), k);
      ctx.backend->matmul_token_panels(group(s.q, k), in, w.wq);
      ctx.backend->matmul_token_panels(group(s.k, k), in, w.wk);
      ctx.backend->matmul_token_panels(group(s.v, k), in, w.wv);
    }
  }
  for (int64_t k = 0; k < t && n > 0; ++k) {
    layer_rope(group(s.q, k), k * Tl + r0, ctx, false);
    layer_rope(group(s.k, k), k * Tl + r0, ctx, false);
  }
  if (!ctx.tp) {
    row_parallel_residual(rows(s.h), rows(s.x), rows(s.attn), w.wo, "tp.attn_out", true, ctx);
  } else {
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.attn_out", n, cfg.hidden_size, ctx.act, Tl);
    const Tensor sums = partial.sums_into(rows(s.h));
    for (int64_t k = 0; k < t && n > 0; ++k)
      ctx.backend->matmul_token_panels(sums.slice_rows(k * n, (k + 1) * n), group(s.attn, k), w.wo);
    partial.reduce_scatter(rows(s.h));
    if (n > 0) ctx.backend->add_into(rows(s.h), rows(s.x));
  }
  if (n == 0) {  // the buffers of the MLP's gather, held as when rows are rebuilt
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", rows(s.xn2), ctx.act, Tl);
    return;
  }
  ctx.backend->rmsnorm_forward(rows(s.xn2), rows(s.inv_rms2), rows(s.h), w.ln2, eps);
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", rows(s.xn2), ctx.act, Tl);
    for (int64_t k = 0; k < t; ++k) {
      const ConstTensor in = group_of(gathered.rows(), k);
      ctx.backend->matmul_token_panels(group(s.gate, k), in, w.wg);
      ctx.backend->matmul_token_panels(group(s.up, k), in, w.wu);
    }
  }
  for (int64_t k = 0; k < t; ++k)
    ctx.backend->swiglu_forward(group(s.act, k), group(s.gate, k), group(s.up, k));
}

void Llama::backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                     const LayerWeights& lw, const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights), dw = bind_weights(ldw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const int64_t t = tp_ranks(ctx);
  // T: the rows of the heads' and units' tensors (all tokens); Tl: this rank's rows of x
  const int64_t T = s.q.rows(), Tl = s.x.rows(), C = cfg.hidden_size;
  const int64_t F = s.act.cols(), QD = s.q.cols(), KD = s.k.cols();
  ActivationAllocator& alloc = *ctx.alloc;
  // y = h + act Wd^T:  d act = dy Wd;  dWd += dy^T act;  dh = dy (+ the norm branch below)
  Tensor dact = alloc.acquire("mlp.dact", {T, F}, ActKind::kTransient, ctx.act);
  {
    const TpGather dy(alloc, ctx.tp, "tp.mlp_dout", dres, ctx.act);
    ctx.backend->matmul(dact, dy.rows(), w.wd, false, false);
    ctx.backend->matmul(dw.wd, dy.rows(), s.act, true, false, 1.0f, 1.0f);
  }
  // act = silu(gate) * up
  Tensor dgate = alloc.acquire("mlp.dgate", {T, F}, ActKind::kTransient, ctx.act);
  Tensor dup = alloc.acquire("mlp.dup", {T, F}, ActKind::kTransient, ctx.act);
  ctx.backend->swiglu_backward(dgate, dup, dact, s.gate, s.up);
  alloc.release(dact);
  // gate = xn2 Wg^T, up = xn2 Wu^T
  Tensor dxn2 = alloc.acquire("mlp.dxn2", {Tl, C}, ActKind::kTransient, ctx.act);
  {
    TpPartial partial(alloc, ctx.tp, "tp.mlp_din", Tl, C, ctx.act);
    const Tensor sums = partial.sums_into(dxn2);
    ctx.backend->matmul(sums, dgate, w.wg, false, false);
    ctx.backend->matmul(sums, dup, w.wu, false, false, 1.0f, 1.0f);
    partial.reduce_scatter(dxn2);
  }
  {
    const TpGather xn2(alloc, ctx.tp, "tp.mlp_in", s.xn2, ctx.act);
    ctx.backend->matmul(dw.wg, dgate, xn2.rows(), true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wu, dup, xn2.rows(), true, false, 1.0f, 1.0f);
  }
  alloc.release(dup);
  alloc.release(dgate);
  // xn2 = rmsnorm(h): dres becomes dL/dh
  ctx.backend->rmsnorm_backward(dres, dw.ln2, dxn2, s.h, w.ln2, s.inv_rms2);
  alloc.release(dxn2);
  // h = x + attn Wo^T:  d attn = dh Wo;  dWo += dh^T attn
  Tensor dattn = alloc.acquire("attn.dattn", {T, QD}, ActKind::kTransient, ctx.act);
  {
    const TpGather dh(alloc, ctx.tp, "tp.attn_dout", dres, ctx.act);
    ctx.backend->matmul(dattn, dh.rows(), w.wo, false, false);
    ctx.backend->matmul(dw.wo, dh.rows(), s.attn, true, false, 1.0f, 1.0f);
  }
  // attention
  Tensor dq = alloc.acquire("attn.dq", {T, QD}, ActKind::kTransient, ctx.act);
  Tensor dk = alloc.acquire("attn.dk", {T, KD}, ActKind::kTransient, ctx.act);
  Tensor dv = alloc.acquire("attn.dv", {T, KD}, ActKind::kTransient, ctx.act);
  layer_attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse,
                           cfg.num_attention_heads / t, cfg.num_key_value_heads / t, ctx);
  alloc.release(dattn);
  layer_rope(dq, 0, ctx, true);
  layer_rope(dk, 0, ctx, true);
  // q, k, v = xn1 W^T
  Tensor dxn1 = alloc.acquire("attn.dxn1", {Tl, C}, ActKind::kTransient, ctx.act);
  {
    TpPartial partial(alloc, ctx.tp, "tp.attn_din", Tl, C, ctx.act);
    const Tensor sums = partial.sums_into(dxn1);
    ctx.backend->matmul(sums, dq, w.wq, false, false);
    ctx.backend->matmul(sums, dk, w.wk, false, false, 1.0f, 1.0f);
    ctx.backend->matmul(sums, dv, w.wv, false, false, 1.0f, 1.0f);
    partial.reduce_scatter(dxn1);
  }
  {
    const TpGather xn1(alloc, ctx.tp, "tp.attn_in", s.xn1, ctx.act);
    ctx.backend->matmul(dw.wq, dq, xn1.rows(), true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wk, dk, xn1.rows(), true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wv, dv, xn1.rows(), true, false, 1.0f, 1.0f);
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
