// The GPT-2 block (Hugging Face GPT2Block, Megatron's GPT layer): LayerNorm, causal multi-head
// self-attention with a fused c_attn projection (biases; RoPE on q and k only with rotary
// positions), c_proj, residual, LayerNorm, c_fc, tanh GELU, c_proj, residual. Weights stay in
// the Conv1D layout [in, out] of the checkpoint (y = x W + b). c_attn's weight [C, 3C] holds
// q | k | v in column blocks; each projection reads its block as a strided [C, C] view, so q, k
// and v are written straight into their saved tensors and never exist fused. The final norm is
// ln_f (LayerNorm with bias); the head is the tied wte.
#include <cmath>
#include <string>

#include "memo/model/architecture.h"
#include "memo/model/named_views.h"

namespace memo {
namespace {

// One block's tensors, in Hugging Face's order.
struct Weights {
  Tensor ln1;       // [C]      ln_1.weight
  Tensor ln1_b;     // [C]      ln_1.bias
  Tensor w_qkv;     // [C, 3C]  attn.c_attn.weight: columns q | k | v
  Tensor b_qkv;     // [3C]     attn.c_attn.bias
  Tensor w_attn_o;  // [C, C]   attn.c_proj.weight
  Tensor b_attn_o;  // [C]      attn.c_proj.bias
  Tensor ln2;       // [C]      ln_2.weight
  Tensor ln2_b;     // [C]      ln_2.bias
  Tensor w_fc;      // [C, F]   mlp.c_fc.weight
  Tensor b_fc;      // [F]      mlp.c_fc.bias
  Tensor w_mlp_o;   // [F, C]   mlp.c_proj.weight
  Tensor b_mlp_o;   // [C]      mlp.c_proj.bias
};
constexpr Tensor Weights::*kWeights[] = {&Weights::ln1,   &Weights::ln1_b,    &Weights::w_qkv,
                                         &Weights::b_qkv, &Weights::w_attn_o, &Weights::b_attn_o,
                                         &Weights::ln2,   &Weights::ln2_b,    &Weights::w_fc,
                                         &Weights::b_fc,  &Weights::w_mlp_o,  &Weights::b_mlp_o};

// What backward reads; shapes per micro-batch, T = B*S tokens. q, k are after RoPE only with
// rotary positions.
struct Saved {
  Tensor x;      // [T, C]    block input: starts every recompute; always offloaded
  Tensor xn1;    // [T, C]    ln_1(x)
  Tensor mean1;  // [T]       mean of x, for ln_1's backward
  Tensor rstd1;  // [T]       1/std of x
  Tensor q;      // [T, C]
  Tensor k;      // [T, C]
  Tensor v;      // [T, C]
  Tensor attn;   // [T, C]    attention output: O(S^2) to rebuild, never recomputed
  Tensor lse;    // [B, H, S] attention log-sum-exp, travels with attn
  Tensor h;      // [T, C]    residual stream after attention: x + attn W_o + b_o
  Tensor xn2;    // [T, C]    ln_2(h)
  Tensor mean2;  // [T]
  Tensor rstd2;  // [T]
  Tensor fc;     // [T, F]    c_fc(xn2), before the GELU
  Tensor act;    // [T, F]    gelu(fc)
};
constexpr SavedSpec<Saved> kSaved[] = {
    {"x", &Saved::x, SavedWidth::kHidden, false},
    {"xn1", &Saved::xn1, SavedWidth::kHidden, true},
    {"mean1", &Saved::mean1, SavedWidth::kToken, true},
    {"rstd1", &Saved::rstd1, SavedWidth::kToken, true},
    {"q", &Saved::q, SavedWidth::kQuery, true},
    {"k", &Saved::k, SavedWidth::kKv, true},
    {"v", &Saved::v, SavedWidth::kKv, true},
    {"attn", &Saved::attn, SavedWidth::kQuery, false},
    {"lse", &Saved::lse, SavedWidth::kHeads, false},
    {"h", &Saved::h, SavedWidth::kHidden, true},
    {"xn2", &Saved::xn2, SavedWidth::kHidden, true},
    {"mean2", &Saved::mean2, SavedWidth::kToken, true},
    {"rstd2", &Saved::rstd2, SavedWidth::kToken, true},
    {"fc", &Saved::fc, SavedWidth::kFfn, true},
    {"act", &Saved::act, SavedWidth::kFfn, true},
};

// Column block i (0: q, 1: k, 2: v) of c_attn's weight [C, 3C] and bias [3C] (under tensor
// parallelism the rank's [C, 3C/t] and [3C/t]: its part of each block).
Tensor qkv_weight(const Weights& w, int i) {
  const int64_t n = w.w_qkv.cols() / 3;
  return w.w_qkv.slice_cols(i * n, (i + 1) * n);
}
Tensor qkv_bias(const Weights& w, int i) {
  const int64_t n = w.b_qkv.rows() / 3;
  return w.b_qkv.slice_rows(i * n, (i + 1) * n);
}

// Rows [r0, r1) of a rank's Tl token rows (Note [Tensor-parallel activations] in
// model/parallel.h): of the norms' tensors (x, xn1, h, xn2 and their statistics), and of each of
// the t groups of Tl rows in the heads' and units' tensors (q, k, v, attn, fc, act), whose inputs
// are the group's gathered rows. Without tensor parallelism t = 1, Tl = T and group 0 is the rows.
struct TokenRows {
  int64_t r0, r1, Tl, t;
  int64_t n() const { return r1 - r0; }
  Tensor rows(const Tensor& x) const { return x.slice_rows(r0, r1); }
  Tensor group(const Tensor& x, int64_t k) const { return x.slice_rows(k * Tl + r0, k * Tl + r1); }
  ConstTensor of_gathered(ConstTensor g, int64_t k) const {
    return g.slice_rows(k * n(), (k + 1) * n());
  }
};

// The per-token part of the forward on rows r: everything but attention and the second c_proj.
// The forward calls it for all rows around attention; the recompute for a token range. Each
// product is a token-panel product over the same rows, so both give the same bits. Under tensor
// parallelism the collectives' buffers are held for all Tl rows whatever the range (empty
// included), so a plan's requests do not depend on alpha.
void attention_inputs(const Saved& s, const TokenRows& r, const Weights& w,
                      const LayerContext& ctx) {
  const ModelConfig& cfg = *ctx.config;
  // q | k | v = ln_1(x) W_attn + b_attn
  if (r.n() > 0)
    ctx.backend->layernorm_forward(r.rows(s.xn1), r.rows(s.mean1), r.rows(s.rstd1), r.rows(s.x),
                                   w.ln1, w.ln1_b, float(cfg.rms_norm_eps));
  const Tensor* out[3] = {&s.q, &s.k, &s.v};
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", r.rows(s.xn1), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.t && r.n() > 0; ++k)
      for (int i = 0; i < 3; ++i) {
        ctx.backend->matmul_token_panels_kn(r.group(*out[i], k), r.of_gathered(gathered.rows(), k),
                                            qkv_weight(w, i));
        ctx.backend->bias_add(r.group(*out[i], k), qkv_bias(w, i));
      }
  }
  if (cfg.uses_rope())
    for (int64_t k = 0; k < r.t && r.n() > 0; ++k) {
      layer_rope(r.group(s.q, k), k * r.Tl + r.r0, ctx, false);
      layer_rope(r.group(s.k, k), k * r.Tl + r.r0, ctx, false);
    }
}

// h = x + attn W_o + b_o;  fc = ln_2(h) W_fc + b_fc;  act = gelu(fc), on rows r.
void attention_outputs(const Saved& s, const TokenRows& r, const Weights& w,
                       const LayerContext& ctx) {
  const int64_t C = ctx.config->hidden_size;
  if (!ctx.tp) {
    ctx.backend->copy(r.rows(s.h), r.rows(s.x));
    ctx.backend->matmul_token_panels_kn(r.rows(s.h), r.rows(s.attn), w.w_attn_o, 1.0f);
  } else {  // the group's partial sums of the row-parallel c_proj, this rank's rows of them
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.attn_out", r.n(), C, ctx.act, r.Tl);
    const Tensor sums = partial.sums_into(r.rows(s.h));
    for (int64_t k = 0; k < r.t && r.n() > 0; ++k)
      ctx.backend->matmul_token_panels_kn(sums.slice_rows(k * r.n(), (k + 1) * r.n()),
                                          r.group(s.attn, k), w.w_attn_o);
    partial.reduce_scatter(r.rows(s.h));
    if (r.n() > 0) ctx.backend->add_into(r.rows(s.h), r.rows(s.x));
  }
  if (r.n() > 0) {
    ctx.backend->bias_add(r.rows(s.h), w.b_attn_o);
    ctx.backend->layernorm_forward(r.rows(s.xn2), r.rows(s.mean2), r.rows(s.rstd2), r.rows(s.h),
                                   w.ln2, w.ln2_b, float(ctx.config->rms_norm_eps));
  }
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", r.rows(s.xn2), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.t && r.n() > 0; ++k)
      ctx.backend->matmul_token_panels_kn(r.group(s.fc, k), r.of_gathered(gathered.rows(), k),
                                          w.w_fc);
  }
  for (int64_t k = 0; k < r.t && r.n() > 0; ++k) {
    ctx.backend->bias_add(r.group(s.fc, k), w.b_fc);
    ctx.backend->gelu_forward(r.group(s.act, k), r.group(s.fc, k));
  }
}

int64_t tp_ranks(const LayerContext& ctx) { return ctx.tp ? ctx.tp->size() : 1; }

class Gpt2 final : public Architecture {
 public:
  std::string_view name() const override { return "gpt2"; }
  std::vector<ParamInfo> params(const ModelConfig& config) const override;
  std::vector<SkeletalField> skeletal_fields(const ModelConfig& config, DType activations,
                                             int64_t tp) const override {
    return skeletal_fields_of(kSaved, config, activations, tp);
  }
  int mlp_matrices() const override { return 2; }
  void forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
               const LayerContext& ctx) const override;
  void recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                        const LayerContext& ctx) const override;
  void backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                const LayerWeights& lw, const LayerContext& ctx) const override;
  // ln_f's mean in row 0, rstd in row 1.
  Shape final_norm_stats_shape(int64_t tokens) const override { return {2, tokens}; }
  void final_norm_forward(Tensor xf, Tensor stats, ConstTensor x, const ModelWeights& w,
                          const ModelConfig& config, Backend& backend) const override {
    const int64_t T = x.rows();
    backend.layernorm_forward(xf, stats.part(0, {T}), stats.part(T, {T}), x, w.norm, w.norm_b,
                              float(config.rms_norm_eps));
  }
  void final_norm_backward(Tensor dx, const ModelWeights& dw, ConstTensor dxf, ConstTensor x,
                           ConstTensor stats, const ModelWeights& w,
                           Backend& backend) const override {
    const int64_t T = x.rows();
    backend.layernorm_backward(dx, dw.norm, dw.norm_b, dxf, x, w.norm, stats.part(0, {T}),
                               stats.part(T, {T}));
  }
  std::string_view optional_name_prefix() const override { return "transformer."; }
  void decode(const DecodeRows& r, const LayerWeights& lw, const ModelConfig& config,
              Backend& backend) const override;
};

// Hugging Face GPT2LMHeadModel's tensors in its order and Conv1D layout ([in, out]); no
// lm_head.weight: the head is wte.
std::vector<ParamInfo> Gpt2::params(const ModelConfig& config) const {
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const double proj_scale = 1.0 / std::sqrt(2.0 * double(config.num_hidden_layers));
  std::vector<ParamInfo> p;
  // split: Note [Tensor-parallel parameters] (Conv1D [in, out]: column-parallel weights split
  // their columns (1), row-parallel ones their rows (0); c_attn's q | k | v block by block)
  auto add = [&p](std::string name, std::vector<int64_t> shape, ParamInit init, ParamRole role,
                  int64_t layer = -1, double std_scale = 1.0, int split = -1, int blocks = 1) {
    p.push_back(
        param_info(std::move(name), std::move(shape), init, role, layer, std_scale, split, blocks));
    p.back().pad_split = role == ParamRole::kEmbedding;
  };
  add("transformer.wte.weight", {V, C}, ParamInit::kNormal, ParamRole::kEmbedding, -1, 1.0, 0);
  if (!config.uses_rope())
    add("transformer.wpe.weight", {config.max_position_embeddings, C}, ParamInit::kNormal,
        ParamRole::kPositions);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {  // in the order of kWeights
    const std::string l = "transformer.h." + std::to_string(i) + ".";
    const ParamRole r = ParamRole::kLayer;
    add(l + "ln_1.weight", {C}, ParamInit::kOne, r, i);
    add(l + "ln_1.bias", {C}, ParamInit::kZero, r, i);
    add(l + "attn.c_attn.weight", {C, 3 * C}, ParamInit::kNormal, r, i, 1.0, 1, 3);
    add(l + "attn.c_attn.bias", {3 * C}, ParamInit::kZero, r, i, 1.0, 0, 3);
    add(l + "attn.c_proj.weight", {C, C}, ParamInit::kNormal, r, i, proj_scale, 0);
    add(l + "attn.c_proj.bias", {C}, ParamInit::kZero, r, i);
    add(l + "ln_2.weight", {C}, ParamInit::kOne, r, i);
    add(l + "ln_2.bias", {C}, ParamInit::kZero, r, i);
    add(l + "mlp.c_fc.weight", {C, F}, ParamInit::kNormal, r, i, 1.0, 1);
    add(l + "mlp.c_fc.bias", {F}, ParamInit::kZero, r, i, 1.0, 0);
    add(l + "mlp.c_proj.weight", {F, C}, ParamInit::kNormal, r, i, proj_scale, 0);
    add(l + "mlp.c_proj.bias", {C}, ParamInit::kZero, r, i);
  }
  add("transformer.ln_f.weight", {C}, ParamInit::kOne, ParamRole::kNorm);
  add("transformer.ln_f.bias", {C}, ParamInit::kZero, ParamRole::kNormBias);
  return p;
}

void Gpt2::forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
                   const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  const int64_t t = tp_ranks(ctx), Tl = s.x.rows(), H = cfg.num_attention_heads / t;
  const TokenRows all{0, Tl, Tl, t};
  // attention block: h = x + c_proj(attn(q, k, v)), q | k | v = c_attn(ln_1(x))
  attention_inputs(s, all, w, ctx);
  layer_attention_forward(s.attn, s.lse, s.q, s.k, s.v, H, H, ctx);
  // MLP block: y = h + c_proj(gelu(c_fc(ln_2(h))))
  attention_outputs(s, all, w, ctx);
  if (!ctx.tp) {
    ctx.backend->copy(y, s.h);
    ctx.backend->matmul(y, s.act, w.w_mlp_o, false, false, 1.0f, 1.0f);
  } else {
    TpPartial partial(*ctx.alloc, ctx.tp, "tp.mlp_out", Tl, cfg.hidden_size, ctx.act);
    ctx.backend->matmul(partial.sums_into(y), s.act, w.w_mlp_o, false, false);
    partial.reduce_scatter(y);
    ctx.backend->add_into(y, s.h);
  }
  ctx.backend->bias_add(y, w.b_mlp_o);
}

void Gpt2::recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                            const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights);
  const int64_t Tl = s.x.rows(), t = tp_ranks(ctx), g = ctx.backend->reproducible_rows();
  check_recompute_rows("gpt2 recompute_tokens", r0, r1, Tl, ctx);
  if (r0 == r1 && !ctx.tp) return;
  MEMO_CHECK(t == 1 || r0 == r1 || g == 0 || Tl % g == 0, "gpt2 recompute_tokens: under tensor ",
             "parallelism the rank's ", Tl, " token rows must be a multiple of the backend's ", g,
             " reproducible rows");
  const TokenRows r{r0, r1, Tl, t};
  attention_inputs(s, r, w, ctx);
  attention_outputs(s, r, w, ctx);
}

void Gpt2::backward(Tensor dres, const LayerWeights& ldw, const SavedActs& saved,
                    const LayerWeights& lw, const LayerContext& ctx) const {
  const Saved s = bind_saved(saved, kSaved);
  const Weights w = bind_weights(lw, kWeights), dw = bind_weights(ldw, kWeights);
  const ModelConfig& cfg = *ctx.config;
  // T: the rows of the heads' and units' tensors (all tokens); Tl: this rank's rows of x
  const int64_t T = s.q.rows(), Tl = s.x.rows(), C = cfg.hidden_size, Cl = s.q.cols();
  const int64_t F = s.act.cols(), H = cfg.num_attention_heads / tp_ranks(ctx);
  ActivationAllocator& alloc = *ctx.alloc;
  // y = h + act W_p + b_p:  d act = dy W_p^T;  dW_p += act^T dy;  db_p += sum_t dy;  dh = dy + ...
  Tensor dact = alloc.acquire("mlp.dact", {T, F}, ActKind::kTransient, ctx.act);
  {
    const TpGather dy(alloc, ctx.tp, "tp.mlp_dout", dres, ctx.act);
    ctx.backend->matmul(dact, dy.rows(), w.w_mlp_o, false, true);
    ctx.backend->matmul(dw.w_mlp_o, s.act, dy.rows(), true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_mlp_o, dres);
  // act = gelu(fc)
  Tensor dfc = alloc.acquire("mlp.dfc", {T, F}, ActKind::kTransient, ctx.act);
  ctx.backend->gelu_backward(dfc, dact, s.fc);
  alloc.release(dact);
  // fc = xn2 W_fc + b_fc:  d xn2 = dfc W_fc^T;  dW_fc += xn2^T dfc;  db_fc += sum_t dfc
  Tensor dxn2 = alloc.acquire("mlp.dxn2", {Tl, C}, ActKind::kTransient, ctx.act);
  {
    TpPartial partial(alloc, ctx.tp, "tp.mlp_din", Tl, C, ctx.act);
    ctx.backend->matmul(partial.sums_into(dxn2), dfc, w.w_fc, false, true);
    partial.reduce_scatter(dxn2);
  }
  {
    const TpGather xn2(alloc, ctx.tp, "tp.mlp_in", s.xn2, ctx.act);
    ctx.backend->matmul(dw.w_fc, xn2.rows(), dfc, true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_fc, dfc);
  alloc.release(dfc);
  // xn2 = ln_2(h): dres becomes dL/dh
  ctx.backend->layernorm_backward(dres, dw.ln2, dw.ln2_b, dxn2, s.h, w.ln2, s.mean2, s.rstd2);
  alloc.release(dxn2);
  // h = x + attn W_o + b_o:  d attn = dh W_o^T;  dW_o += attn^T dh;  db_o += sum_t dh
  Tensor dattn = alloc.acquire("attn.dattn", {T, Cl}, ActKind::kTransient, ctx.act);
  {
    const TpGather dh(alloc, ctx.tp, "tp.attn_dout", dres, ctx.act);
    ctx.backend->matmul(dattn, dh.rows(), w.w_attn_o, false, true);
    ctx.backend->matmul(dw.w_attn_o, s.attn, dh.rows(), true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_attn_o, dres);
  // attention
  Tensor dq = alloc.acquire("attn.dq", {T, Cl}, ActKind::kTransient, ctx.act);
  Tensor dk = alloc.acquire("attn.dk", {T, Cl}, ActKind::kTransient, ctx.act);
  Tensor dv = alloc.acquire("attn.dv", {T, Cl}, ActKind::kTransient, ctx.act);
  layer_attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse, H, H, ctx);
  alloc.release(dattn);
  if (cfg.uses_rope()) {
    layer_rope(dq, 0, ctx, true);
    layer_rope(dk, 0, ctx, true);
  }
  // q | k | v = xn1 W_attn + b_attn; per block i: d xn1 += d_i W_i^T, dW_i += xn1^T d_i,
  // db_i += sum_t d_i
  Tensor dxn1 = alloc.acquire("attn.dxn1", {Tl, C}, ActKind::kTransient, ctx.act);
  const Tensor* grads[3] = {&dq, &dk, &dv};
  {
    TpPartial partial(alloc, ctx.tp, "tp.attn_din", Tl, C, ctx.act);  // both live across the blocks
    const TpGather xn1(alloc, ctx.tp, "tp.attn_in", s.xn1, ctx.act);
    const Tensor sums = partial.sums_into(dxn1);
    for (int i = 0; i < 3; ++i) {
      ctx.backend->matmul(sums, *grads[i], qkv_weight(w, i), false, true, 1.0f,
                          i == 0 ? 0.0f : 1.0f);
      ctx.backend->matmul(qkv_weight(dw, i), xn1.rows(), *grads[i], true, false, 1.0f, 1.0f);
      ctx.backend->bias_backward(qkv_bias(dw, i), *grads[i]);
    }
    partial.reduce_scatter(dxn1);
  }
  alloc.release(dv);
  alloc.release(dk);
  alloc.release(dq);
  // xn1 = ln_1(x): dres becomes dL/dx
  ctx.backend->layernorm_backward(dres, dw.ln1, dw.ln1_b, dxn1, s.x, w.ln1, s.mean1, s.rstd1);
  alloc.release(dxn1);
}

// q | k | v = ln_1(x) W_attn + b_attn;  h = x + attn W_o + b_o;
// y = h + c_proj(gelu(c_fc(ln_2(h)))), on the decoded rows.
void Gpt2::decode(const DecodeRows& r, const LayerWeights& lw, const ModelConfig& config,
                  Backend& backend) const {
  const Weights w = bind_weights(lw, kWeights);
  const int64_t D = config.head_dim();
  const float eps = float(config.rms_norm_eps);
  backend.layernorm_forward(r.xn, r.mean, r.rstd, r.x, w.ln1, w.ln1_b, eps);
  const Tensor* out[3] = {&r.q, &r.k, &r.v};
  for (int i = 0; i < 3; ++i) {
    backend.matmul_token_panels_kn(*out[i], r.xn, qkv_weight(w, i));
    backend.bias_add(*out[i], qkv_bias(w, i));
  }
  if (config.uses_rope()) {
    backend.rope_forward(r.q, r.rope_cos, r.rope_sin, D, r.position);
    backend.rope_forward(r.k, r.rope_cos, r.rope_sin, D, r.position);
  }
  r.attend();
  backend.copy(r.h, r.x);
  backend.matmul_token_panels_kn(r.h, r.attn, w.w_attn_o, 1.0f);
  backend.bias_add(r.h, w.b_attn_o);
  backend.layernorm_forward(r.xn, r.mean, r.rstd, r.h, w.ln2, w.ln2_b, eps);
  backend.matmul_token_panels_kn(r.mlp_gate, r.xn, w.w_fc);
  backend.bias_add(r.mlp_gate, w.b_fc);
  backend.gelu_forward(r.mlp_act, r.mlp_gate);
  backend.copy(r.x, r.h);
  backend.matmul(r.x, r.mlp_act, w.w_mlp_o, false, false, 1.0f, 1.0f);
  backend.bias_add(r.x, w.b_mlp_o);
}

}  // namespace

const Architecture& gpt2_architecture() {
  static const Gpt2 gpt2;
  return gpt2;
}

}  // namespace memo
