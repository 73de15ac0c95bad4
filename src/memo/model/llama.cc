// The LLaMA decoder layer (Hugging Face LlamaDecoderLayer): RMSNorm, causal GQA self-attention with
// RoPE, residual, RMSNorm, SwiGLU MLP, residual; Linear weights [out, in] (y = x W^T), no biases,
// but for Qwen2's layer (Qwen2DecoderLayer), the same with biases on q_proj, k_proj and v_proj
// (added before RoPE); model/qwen2.cc registers it.
// The final norm is an RMSNorm, the head lm_head or the tied embedding. Forward and backward are
// straight lists of kernel calls in the order of the math; the per-token products go through
// matmul_token_panels so recompute_tokens can rebuild any panel-aligned token range exactly (the
// down projection is never rebuilt and takes one call).
#include <memory>
#include <string>
#include <utility>

#include "memo/model/architecture.h"
#include "memo/model/llama_layer.h"
#include "memo/model/named_views.h"

namespace memo {
namespace {

// One layer's tensors, in Hugging Face's order.
struct Weights {
  Tensor ln1;  // [C]          input_layernorm
  Tensor wq;   // [H*D, C]     q_proj
  Tensor bq;   // [H*D]        q_proj.bias (Qwen2; empty for LLaMA)
  Tensor wk;   // [Hkv*D, C]   k_proj
  Tensor bk;   // [Hkv*D]      k_proj.bias (Qwen2)
  Tensor wv;   // [Hkv*D, C]   v_proj
  Tensor bv;   // [Hkv*D]      v_proj.bias (Qwen2)
  Tensor wo;   // [C, H*D]     o_proj
  Tensor ln2;  // [C]          post_attention_layernorm
  Tensor wg;   // [F, C]       gate_proj
  Tensor wu;   // [F, C]       up_proj
  Tensor wd;   // [C, F]       down_proj
};
constexpr Tensor Weights::*kWeights[] = {&Weights::ln1, &Weights::wq, &Weights::wk,
                                         &Weights::wv,  &Weights::wo, &Weights::ln2,
                                         &Weights::wg,  &Weights::wu, &Weights::wd};
constexpr Tensor Weights::*kQkvBiasWeights[] = {
    &Weights::ln1, &Weights::wq, &Weights::bq,  &Weights::wk, &Weights::bk, &Weights::wv,
    &Weights::bv,  &Weights::wo, &Weights::ln2, &Weights::wg, &Weights::wu, &Weights::wd};

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
  Llama(std::string_view name, bool qkv_bias) : name_(name), qkv_bias_(qkv_bias) {}
  std::string_view name() const override { return name_; }
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

 private:
  Weights bind(const LayerWeights& lw) const {
    return qkv_bias_ ? bind_weights(lw, kQkvBiasWeights) : bind_weights(lw, kWeights);
  }
  std::string_view name_;
  bool qkv_bias_;
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
    for (const auto& [proj, rows] : {std::pair{"q_proj", QD}, {"k_proj", KD}, {"v_proj", KD}}) {
      add(l + "self_attn." + proj + ".weight", {rows, C}, ParamInit::kNormal, r, i, 0);
      if (qkv_bias_) add(l + "self_attn." + proj + ".bias", {rows}, ParamInit::kZero, r, i, 0);
    }
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

// Rows [r0, r1) of a rank's Tl token rows (Note [Tensor-parallel activations] in
// model/parallel.h): of the norms' tensors (x, xn1, h, xn2 and their statistics), and of each of
// the t groups of Tl rows in the heads' and units' tensors (q, k, v, attn, gate, up, act), whose
// inputs are the group's gathered rows. Without tensor parallelism t = 1, Tl = T and group 0 is
// the rows. The forward's range is every row: its products are then one call over all T rows of a
// tensor (one piece), as they were before tensor parallelism split them; a rebuilt range is one
// piece per group, which gives the forward's bits where each group starts on the backend's
// reproducible rows (the rebuild's check).
struct TokenRows {
  int64_t r0, r1, Tl, t;
  int64_t n() const { return r1 - r0; }
  bool all() const { return r0 == 0 && r1 == Tl; }
  Tensor rows(const Tensor& x) const { return x.slice_rows(r0, r1); }
  int64_t pieces() const { return n() == 0 ? 0 : all() ? 1 : t; }
  // Piece k of a T-row tensor, of the t stacked n-row blocks of a gather or of partial sums, and
  // the token row it starts at.
  Tensor piece(const Tensor& x, int64_t k) const {
    return all() ? x : x.slice_rows(k * Tl + r0, k * Tl + r1);
  }
  template <typename Rows>  // Tensor or ConstTensor
  Rows stacked(const Rows& g, int64_t k) const {
    return all() ? g : g.slice_rows(k * n(), (k + 1) * n());
  }
  int64_t first_row(int64_t k) const { return all() ? 0 : k * Tl + r0; }
};

// The per-token part of the forward on rows r: everything but attention and the down projection.
// The forward calls it for all rows around attention; the rebuild for a token range. Under tensor
// parallelism the collectives' buffers are held for all Tl rows whatever the range (empty
// included), so a plan's requests do not depend on alpha.
void attention_inputs(const Saved& s, const TokenRows& r, const Weights& w,
                      const LayerContext& ctx) {
  Backend& be = *ctx.backend;
  // q, k, v = rope(xn1 Wq^T), rope(xn1 Wk^T), xn1 Wv^T;  xn1 = rmsnorm(x)
  if (r.n() > 0)
    be.rmsnorm_forward(r.rows(s.xn1), r.rows(s.inv_rms1), r.rows(s.x), w.ln1,
                       float(ctx.config->rms_norm_eps));
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", r.rows(s.xn1), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.pieces(); ++k) {
      const ConstTensor in = r.stacked(gathered.rows(), k);
      be.matmul_token_panels(r.piece(s.q, k), in, w.wq);
      be.matmul_token_panels(r.piece(s.k, k), in, w.wk);
      be.matmul_token_panels(r.piece(s.v, k), in, w.wv);
      if (!w.bq.empty()) {  // Qwen2: each row's own adds, so a rebuilt range matches the forward
        be.bias_add(r.piece(s.q, k), w.bq);
        be.bias_add(r.piece(s.k, k), w.bk);
        be.bias_add(r.piece(s.v, k), w.bv);
      }
    }
  }
  for (int64_t k = 0; k < r.pieces(); ++k) {
    layer_rope(r.piece(s.q, k), r.first_row(k), ctx, false);
    layer_rope(r.piece(s.k, k), r.first_row(k), ctx, false);
  }
}

// h = x + attn Wo^T;  act = silu(xn2 Wg^T) * (xn2 Wu^T), xn2 = rmsnorm(h), on rows r. The
// row-parallel o_proj under tensor parallelism: the group's partial sums, reduce-scattered to this
// rank's rows, then the residual added; otherwise one product into h with x as its start.
void attention_outputs(const Saved& s, const TokenRows& r, const Weights& w,
                       const LayerContext& ctx) {
  Backend& be = *ctx.backend;
  if (!ctx.tp) {
    be.copy(r.rows(s.h), r.rows(s.x));
    be.matmul_token_panels(r.rows(s.h), r.rows(s.attn), w.wo, 1.0f);
  } else {
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.attn_out", r.n(), ctx.config->hidden_size, ctx.act,
                      r.Tl);
    const Tensor sums = partial.sums_into(r.rows(s.h));
    for (int64_t k = 0; k < r.pieces(); ++k)
      be.matmul_token_panels(r.stacked(sums, k), r.piece(s.attn, k), w.wo);
    partial.reduce_scatter(r.rows(s.h));
    if (r.n() > 0) be.add_into(r.rows(s.h), r.rows(s.x));
  }
  if (r.n() > 0)
    be.rmsnorm_forward(r.rows(s.xn2), r.rows(s.inv_rms2), r.rows(s.h), w.ln2,
                       float(ctx.config->rms_norm_eps));
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", r.rows(s.xn2), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.pieces(); ++k) {
      const ConstTensor in = r.stacked(gathered.rows(), k);
      be.matmul_token_panels(r.piece(s.gate, k), in, w.wg);
      be.matmul_token_panels(r.piece(s.up, k), in, w.wu);
    }
  }
  for (int64_t k = 0; k < r.pieces(); ++k)
    be.swiglu_forward(r.piece(s.act, k), r.piece(s.gate, k), r.piece(s.up, k));
}

void Llama::forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
                    const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind(lw);
  const ModelConfig& cfg = *ctx.config;
  const int64_t t = tp_ranks(ctx), Tl = s.x.rows();
  const TokenRows all{0, Tl, Tl, t};
  // attention block: h = x + o_proj(attn(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)))
  attention_inputs(s, all, w, ctx);
  layer_attention_forward(s.attn, s.lse, s.q, s.k, s.v, cfg.num_attention_heads / t,
                          cfg.num_key_value_heads / t, ctx);
  // MLP block: y = h + down_proj(silu(gate_proj(xn2)) * up_proj(xn2))
  attention_outputs(s, all, w, ctx);
  if (!ctx.tp) {
    ctx.backend->copy(y, s.h);
    ctx.backend->matmul(y, s.act, w.wd, false, true, 1.0f, 1.0f);
  } else {  // row-parallel, as o_proj
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.mlp_out", Tl, cfg.hidden_size, ctx.act);
    ctx.backend->matmul(partial.sums_into(y), s.act, w.wd, false, true);
    partial.reduce_scatter(y);
    ctx.backend->add_into(y, s.h);
  }
}

// forward without attention and the down projection, on rows [r0, r1) of each tensor: of the
// rank's T/t rows, and of every group of T/t in the T-row tensors under tensor parallelism.
void Llama::recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                             const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind(lw);
  const int64_t Tl = s.x.rows(), t = tp_ranks(ctx), g = ctx.backend->reproducible_rows();
  check_recompute_rows("llama recompute_tokens", r0, r1, Tl, ctx);
  if (r0 == r1 && !ctx.tp) return;
  MEMO_CHECK(t == 1 || r0 == r1 || g == 0 || Tl % g == 0, "llama recompute_tokens: under tensor ",
             "parallelism the rank's ", Tl, " token rows must be a multiple of the backend's ", g,
             " reproducible rows");
  const TokenRows r{r0, r1, Tl, t};
  attention_inputs(s, r, w, ctx);
  attention_outputs(s, r, w, ctx);
}

void Llama::backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                     const LayerWeights& lw, const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind(lw), dw = bind(ldw);
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
  if (!w.bq.empty()) {  // q, k, v = xn1 W^T + b
    ctx.backend->bias_backward(dw.bq, dq);
    ctx.backend->bias_backward(dw.bk, dk);
    ctx.backend->bias_backward(dw.bv, dv);
  }
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
  const Weights w = bind(lw);
  const int64_t D = config.head_dim();
  const float eps = float(config.rms_norm_eps);
  backend.rmsnorm_forward(r.xn, r.rstd, r.x, w.ln1, eps);
  backend.matmul_token_panels(r.q, r.xn, w.wq);
  backend.matmul_token_panels(r.k, r.xn, w.wk);
  backend.matmul_token_panels(r.v, r.xn, w.wv);
  if (!w.bq.empty()) {
    backend.bias_add(r.q, w.bq);
    backend.bias_add(r.k, w.bk);
    backend.bias_add(r.v, w.bv);
  }
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
  static const Llama llama("llama", false);
  return llama;
}

std::unique_ptr<Architecture> make_llama_layer(std::string_view name, bool qkv_bias) {
  return std::make_unique<Llama>(name, qkv_bias);
}

}  // namespace memo
