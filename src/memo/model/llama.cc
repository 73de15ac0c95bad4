// The LLaMA decoder layer (Hugging Face LlamaDecoderLayer): RMSNorm, causal GQA self-attention with
// RoPE, residual, RMSNorm, SwiGLU MLP, residual; Linear weights [out, in] (y = x W^T), with biases
// on q, k, v and o_proj under the config's attention_bias and on gate, up and down_proj under its
// mlp_bias. Qwen2's layer (Qwen2DecoderLayer) adds biases on q_proj, k_proj and v_proj (before
// RoPE), Qwen3's (Qwen3DecoderLayer) an RMSNorm over each head of q and k before RoPE (q_norm,
// k_norm); model/qwen2.cc and model/qwen3.cc register them.
// The final norm is an RMSNorm, the head lm_head or the tied embedding. Forward and backward are
// straight lists of kernel calls in the order of the math; the per-token products go through
// matmul_token_panels so recompute_tokens can rebuild any panel-aligned token range exactly (the
// down projection is never rebuilt and takes one call).
#include <array>
#include <memory>
#include <string>
#include <utility>

#include "memo/model/architecture.h"
#include "memo/model/llama_layer.h"
#include "memo/model/named_views.h"

namespace memo {
namespace {

// One layer's tensors, in Hugging Face's order; an optional one is empty when the layer lacks it
// (LayerTensors).
struct Weights {
  Tensor ln1;  // [C]          input_layernorm
  Tensor wq;   // [H*D, C]     q_proj
  Tensor bq;   // [H*D]        q_proj.bias (Qwen2, attention_bias)
  Tensor wk;   // [Hkv*D, C]   k_proj
  Tensor bk;   // [Hkv*D]      k_proj.bias (Qwen2, attention_bias)
  Tensor wv;   // [Hkv*D, C]   v_proj
  Tensor bv;   // [Hkv*D]      v_proj.bias (Qwen2, attention_bias)
  Tensor wo;   // [C, H*D]     o_proj
  Tensor bo;   // [C]          o_proj.bias (attention_bias)
  Tensor qn;   // [D]          q_norm (Qwen3)
  Tensor kn;   // [D]          k_norm (Qwen3)
  Tensor ln2;  // [C]          post_attention_layernorm
  Tensor wg;   // [F, C]       gate_proj
  Tensor bg;   // [F]          gate_proj.bias (mlp_bias)
  Tensor wu;   // [F, C]       up_proj
  Tensor bu;   // [F]          up_proj.bias (mlp_bias)
  Tensor wd;   // [C, F]       down_proj
  Tensor bd;   // [C]          down_proj.bias (mlp_bias)
};

// Which optional tensors a layer has: q/k/v biases (Qwen2's always; attention_bias), the o_proj
// bias (attention_bias), the MLP's biases (mlp_bias), the q/k head norms (Qwen3).
struct LayerTensors {
  bool qkv_bias, o_bias, mlp_bias, qk_norm;
};

// The Weights members a layer binds, in the order of Llama::params.
struct WeightMembers {
  std::array<Tensor Weights::*, 18> at{};
  int count = 0;
};
WeightMembers weight_members(const LayerTensors& t) {
  WeightMembers m;
  auto add = [&m](Tensor Weights::*member, bool present) {
    if (present) m.at[size_t(m.count++)] = member;
  };
  add(&Weights::ln1, true);
  add(&Weights::wq, true);
  add(&Weights::bq, t.qkv_bias);
  add(&Weights::wk, true);
  add(&Weights::bk, t.qkv_bias);
  add(&Weights::wv, true);
  add(&Weights::bv, t.qkv_bias);
  add(&Weights::wo, true);
  add(&Weights::bo, t.o_bias);
  add(&Weights::qn, t.qk_norm);
  add(&Weights::kn, t.qk_norm);
  add(&Weights::ln2, true);
  add(&Weights::wg, true);
  add(&Weights::bg, t.mlp_bias);
  add(&Weights::wu, true);
  add(&Weights::bu, t.mlp_bias);
  add(&Weights::wd, true);
  add(&Weights::bd, t.mlp_bias);
  return m;
}

// What backward reads; shapes per micro-batch, T = B*S tokens. Every field except x is written by
// forward; x is the layer input, written by whoever produced it.
struct Saved {
  Tensor x;          // [T, C]     layer input: starts every recompute; always offloaded
  Tensor xn1;        // [T, C]     input_layernorm(x)
  Tensor inv_rms1;   // [T]        1/rms of x, for the norm's backward
  Tensor q;          // [T, H*D]   queries after RoPE
  Tensor k;          // [T, Hkv*D] keys after RoPE
  Tensor v;          // [T, Hkv*D] values
  Tensor q_raw;      // [T, H*D]   Qwen3: q_proj's output, before q_norm (the norm's backward)
  Tensor k_raw;      // [T, Hkv*D] Qwen3: k_proj's output, before k_norm
  Tensor inv_rms_q;  // [T, H]    Qwen3: 1/rms of each head of q_raw
  Tensor inv_rms_k;  // [T, Hkv]  Qwen3: 1/rms of each head of k_raw
  Tensor attn;       // [T, H*D]   attention output: O(S^2) to rebuild, never recomputed
  Tensor lse;        // [B, H, S]  attention log-sum-exp, travels with attn
  Tensor h;          // [T, C]     residual stream after attention: x + attn o_proj
  Tensor xn2;        // [T, C]     post_attention_layernorm(h)
  Tensor inv_rms2;   // [T]
  Tensor gate;       // [T, F]     gate_proj(xn2)
  Tensor up;         // [T, F]     up_proj(xn2)
  Tensor act;        // [T, F]     silu(gate) * up
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
// Qwen3's: LLaMA's and the q/k norms' inputs and statistics.
constexpr SavedSpec<Saved> kSavedQkNorm[] = {
    {"x", &Saved::x, SavedWidth::kHidden, false},
    {"xn1", &Saved::xn1, SavedWidth::kHidden, true},
    {"inv_rms1", &Saved::inv_rms1, SavedWidth::kToken, true},
    {"q", &Saved::q, SavedWidth::kQuery, true},
    {"k", &Saved::k, SavedWidth::kKv, true},
    {"v", &Saved::v, SavedWidth::kKv, true},
    {"q_raw", &Saved::q_raw, SavedWidth::kQuery, true},
    {"k_raw", &Saved::k_raw, SavedWidth::kKv, true},
    {"inv_rms_q", &Saved::inv_rms_q, SavedWidth::kQueryHeads, true},
    {"inv_rms_k", &Saved::inv_rms_k, SavedWidth::kKvHeads, true},
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
  Llama(std::string_view name, bool qkv_bias, bool qk_norm)
      : name_(name), qkv_bias_(qkv_bias), qk_norm_(qk_norm) {}
  std::string_view name() const override { return name_; }
  std::vector<ParamInfo> params(const ModelConfig& config) const override;
  std::vector<SkeletalField> skeletal_fields(const ModelConfig& config, DType activations,
                                             int64_t tp) const override {
    return qk_norm_ ? skeletal_fields_of(kSavedQkNorm, config, activations, tp)
                    : skeletal_fields_of(kSaved, config, activations, tp);
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
  LayerTensors tensors(const ModelConfig& config) const {
    return {qkv_bias_ || config.attention_bias, config.attention_bias, config.mlp_bias, qk_norm_};
  }
  Weights bind(const LayerWeights& lw, const ModelConfig& config) const {
    const WeightMembers m = weight_members(tensors(config));
    MEMO_CHECK(lw.count == m.count, "a ", name_, " layer with ", lw.count, " tensors bound as ",
               m.count);
    Weights named;
    for (int i = 0; i < m.count; ++i) named.*m.at[size_t(i)] = lw[i];
    return named;
  }
  Saved bind(const SavedActs& saved) const {
    return qk_norm_ ? bind_saved(saved, kSavedQkNorm) : bind_saved(saved, kSaved);
  }
  std::string_view name_;
  bool qkv_bias_;  // Qwen2's q/k/v biases, whatever the config
  bool qk_norm_;   // Qwen3's q_norm and k_norm
};

std::vector<ParamInfo> Llama::params(const ModelConfig& config) const {
  const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const int64_t D = config.head_dim(), QD = config.num_attention_heads * D, KD = config.kv_dim();
  const LayerTensors t = tensors(config);
  std::vector<ParamInfo> p;
  // split: Note [Tensor-parallel parameters] (rows 0, columns 1, whole -1)
  auto add = [&p](std::string name, std::vector<int64_t> shape, ParamInit init, ParamRole role,
                  int64_t layer, int split) {
    p.push_back(param_info(std::move(name), std::move(shape), init, role, layer, 1.0, split));
    p.back().pad_split = role == ParamRole::kEmbedding || role == ParamRole::kHead;
  };
  add("model.embed_tokens.weight", {V, C}, ParamInit::kNormal, ParamRole::kEmbedding, -1, 0);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {  // in the order of weight_members
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const ParamRole r = ParamRole::kLayer;
    // a column-parallel product's bias splits with its rows; a row-parallel one's is whole
    auto linear = [&](const std::string& name, int64_t out, int64_t in, int split, bool bias) {
      add(l + name + ".weight", {out, in}, ParamInit::kNormal, r, i, split);
      if (bias) add(l + name + ".bias", {out}, ParamInit::kZero, r, i, split == 0 ? 0 : -1);
    };
    add(l + "input_layernorm.weight", {C}, ParamInit::kOne, r, i, -1);
    linear("self_attn.q_proj", QD, C, 0, t.qkv_bias);
    linear("self_attn.k_proj", KD, C, 0, t.qkv_bias);
    linear("self_attn.v_proj", KD, C, 0, t.qkv_bias);
    linear("self_attn.o_proj", C, QD, 1, t.o_bias);
    if (t.qk_norm) {
      add(l + "self_attn.q_norm.weight", {D}, ParamInit::kOne, r, i, -1);
      add(l + "self_attn.k_norm.weight", {D}, ParamInit::kOne, r, i, -1);
    }
    add(l + "post_attention_layernorm.weight", {C}, ParamInit::kOne, r, i, -1);
    linear("mlp.gate_proj", F, C, 0, t.mlp_bias);
    linear("mlp.up_proj", F, C, 0, t.mlp_bias);
    linear("mlp.down_proj", C, F, 1, t.mlp_bias);
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

// Qwen3's q_norm / k_norm: y = rmsnorm(x) over each D-wide head of x's rows, the kernel's rows
// being the heads ([n, heads*D] viewed as [n*heads, D]; inv_rms [n, heads] as [n*heads]).
void head_rmsnorm_forward(Backend& be, Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                          float eps) {
  const int64_t D = w.numel(), rows = x.numel() / D;
  be.rmsnorm_forward(y.reshape({rows, D}), inv_rms.reshape({rows}), x.reshape({rows, D}), w, eps);
}

// The per-token part of the forward on rows r: everything but attention and the down projection.
// The forward calls it for all rows around attention; the rebuild for a token range. Under tensor
// parallelism the collectives' buffers are held for all Tl rows whatever the range (empty
// included), so a plan's requests do not depend on alpha.
void attention_inputs(const Saved& s, const TokenRows& r, const Weights& w,
                      const LayerContext& ctx) {
  Backend& be = *ctx.backend;
  const float eps = float(ctx.config->rms_norm_eps);
  // q, k, v = rope(xn1 Wq^T + bq), rope(xn1 Wk^T + bk), xn1 Wv^T + bv;  xn1 = rmsnorm(x); with
  // q/k norms (Qwen3) q = rope(q_norm(q_raw)), q_raw = xn1 Wq^T + bq, and so for k
  if (r.n() > 0) be.rmsnorm_forward(r.rows(s.xn1), r.rows(s.inv_rms1), r.rows(s.x), w.ln1, eps);
  const bool qk_norm = !w.qn.empty();
  const Tensor q = qk_norm ? s.q_raw : s.q, k_ = qk_norm ? s.k_raw : s.k;
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.attn_in", r.rows(s.xn1), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.pieces(); ++k) {
      const ConstTensor in = r.stacked(gathered.rows(), k);
      be.matmul_token_panels(r.piece(q, k), in, w.wq);
      be.matmul_token_panels(r.piece(k_, k), in, w.wk);
      be.matmul_token_panels(r.piece(s.v, k), in, w.wv);
      if (!w.bq.empty()) {  // each row's own adds, so a rebuilt range matches the forward
        be.bias_add(r.piece(q, k), w.bq);
        be.bias_add(r.piece(k_, k), w.bk);
        be.bias_add(r.piece(s.v, k), w.bv);
      }
    }
  }
  for (int64_t k = 0; qk_norm && k < r.pieces(); ++k) {
    head_rmsnorm_forward(be, r.piece(s.q, k), r.piece(s.inv_rms_q, k), r.piece(s.q_raw, k), w.qn,
                         eps);
    head_rmsnorm_forward(be, r.piece(s.k, k), r.piece(s.inv_rms_k, k), r.piece(s.k_raw, k), w.kn,
                         eps);
  }
  for (int64_t k = 0; k < r.pieces(); ++k) {
    layer_rope(r.piece(s.q, k), r.first_row(k), ctx, false);
    layer_rope(r.piece(s.k, k), r.first_row(k), ctx, false);
  }
}

// h = x + attn Wo^T (+ bo);  act = silu(xn2 Wg^T + bg) * (xn2 Wu^T + bu), xn2 = rmsnorm(h), on
// rows r. The row-parallel o_proj under tensor parallelism: the group's partial sums,
// reduce-scattered to this rank's rows, then the residual and the bias added (once, on the rank's
// rows); otherwise one product into h with x as its start.
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
  if (!w.bo.empty() && r.n() > 0) be.bias_add(r.rows(s.h), w.bo);
  if (r.n() > 0)
    be.rmsnorm_forward(r.rows(s.xn2), r.rows(s.inv_rms2), r.rows(s.h), w.ln2,
                       float(ctx.config->rms_norm_eps));
  {
    const TpGather gathered(*ctx.alloc, ctx.tp, "tp.mlp_in", r.rows(s.xn2), ctx.act, r.Tl);
    for (int64_t k = 0; k < r.pieces(); ++k) {
      const ConstTensor in = r.stacked(gathered.rows(), k);
      be.matmul_token_panels(r.piece(s.gate, k), in, w.wg);
      be.matmul_token_panels(r.piece(s.up, k), in, w.wu);
      if (!w.bg.empty()) {
        be.bias_add(r.piece(s.gate, k), w.bg);
        be.bias_add(r.piece(s.up, k), w.bu);
      }
    }
  }
  for (int64_t k = 0; k < r.pieces(); ++k)
    be.swiglu_forward(r.piece(s.act, k), r.piece(s.gate, k), r.piece(s.up, k));
}

// The backward of head_rmsnorm_forward in place: on entry d = dL/dy, on exit dL/dx (the kernel
// adds into its dx, so into a zeroed transient, then copied back); dw accumulates.
void head_rmsnorm_backward(Backend& be, ActivationAllocator& alloc, const char* name, Tensor d,
                           Tensor dw, ConstTensor x, ConstTensor w, ConstTensor inv_rms,
                           DType act) {
  const int64_t D = w.numel(), rows = d.numel() / D;
  ScopedAct dx(alloc, name, d.shape(), act);
  be.fill(*dx, 0.0f);
  be.rmsnorm_backward(dx->reshape({rows, D}), dw, d.reshape({rows, D}), x.reshape({rows, D}), w,
                      inv_rms.reshape({rows}));
  be.copy(d, *dx);
}

void Llama::forward(Tensor y, const SavedActs& saved, const LayerWeights& lw,
                    const LayerContext& ctx) const {
  const Saved s = bind(saved);
  const Weights w = bind(lw, *ctx.config);
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
  if (!w.bd.empty()) ctx.backend->bias_add(y, w.bd);
}

// forward without attention and the down projection, on rows [r0, r1) of each tensor: of the
// rank's T/t rows, and of every group of T/t in the T-row tensors under tensor parallelism.
void Llama::recompute_tokens(const SavedActs& saved, int64_t r0, int64_t r1, const LayerWeights& lw,
                             const LayerContext& ctx) const {
  const Saved s = bind(saved);
  const Weights w = bind(lw, *ctx.config);
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
  const Saved s = bind(saved);
  const Weights w = bind(lw, *ctx.config), dw = bind(ldw, *ctx.config);
  const ModelConfig& cfg = *ctx.config;
  const int64_t t = tp_ranks(ctx);
  // T: the rows of the heads' and units' tensors (all tokens); Tl: this rank's rows of x
  const int64_t T = s.q.rows(), Tl = s.x.rows(), C = cfg.hidden_size;
  const int64_t F = s.act.cols(), QD = s.q.cols(), KD = s.k.cols();
  ActivationAllocator& alloc = *ctx.alloc;
  // y = h + act Wd^T (+ bd):  d act = dy Wd;  dWd += dy^T act;  dbd += sum_t dy;  dh = dy (+ the
  // norm branch below)
  if (!w.bd.empty()) ctx.backend->bias_backward(dw.bd, dres);
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
  // gate = xn2 Wg^T (+ bg), up = xn2 Wu^T (+ bu)
  if (!w.bg.empty()) {
    ctx.backend->bias_backward(dw.bg, dgate);
    ctx.backend->bias_backward(dw.bu, dup);
  }
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
  // h = x + attn Wo^T (+ bo):  d attn = dh Wo;  dWo += dh^T attn;  dbo += sum_t dh
  if (!w.bo.empty()) ctx.backend->bias_backward(dw.bo, dres);
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
  if (!w.qn.empty()) {  // q = q_norm(q_raw), k = k_norm(k_raw): dq, dk become d q_raw, d k_raw
    Backend& be = *ctx.backend;
    head_rmsnorm_backward(be, alloc, "attn.dq_raw", dq, dw.qn, s.q_raw, w.qn, s.inv_rms_q, ctx.act);
    head_rmsnorm_backward(be, alloc, "attn.dk_raw", dk, dw.kn, s.k_raw, w.kn, s.inv_rms_k, ctx.act);
  }
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
  const Weights w = bind(lw, config);
  const int64_t D = config.head_dim();
  const float eps = float(config.rms_norm_eps);
  const bool qk_norm = !w.qn.empty();
  const Tensor q = qk_norm ? r.q_raw : r.q, k = qk_norm ? r.k_raw : r.k;
  backend.rmsnorm_forward(r.xn, r.rstd, r.x, w.ln1, eps);
  backend.matmul_token_panels(q, r.xn, w.wq);
  backend.matmul_token_panels(k, r.xn, w.wk);
  backend.matmul_token_panels(r.v, r.xn, w.wv);
  if (!w.bq.empty()) {
    backend.bias_add(q, w.bq);
    backend.bias_add(k, w.bk);
    backend.bias_add(r.v, w.bv);
  }
  if (qk_norm) {
    head_rmsnorm_forward(backend, r.q, r.q_rstd, q, w.qn, eps);
    head_rmsnorm_forward(backend, r.k, r.k_rstd, k, w.kn, eps);
  }
  backend.rope_forward(r.q, r.rope_cos, r.rope_sin, D, r.position);
  backend.rope_forward(r.k, r.rope_cos, r.rope_sin, D, r.position);
  r.attend();
  backend.copy(r.h, r.x);
  backend.matmul_token_panels(r.h, r.attn, w.wo, 1.0f);
  if (!w.bo.empty()) backend.bias_add(r.h, w.bo);
  backend.rmsnorm_forward(r.xn, r.rstd, r.h, w.ln2, eps);
  backend.matmul_token_panels(r.mlp_gate, r.xn, w.wg);
  backend.matmul_token_panels(r.mlp_in, r.xn, w.wu);
  if (!w.bg.empty()) {
    backend.bias_add(r.mlp_gate, w.bg);
    backend.bias_add(r.mlp_in, w.bu);
  }
  backend.swiglu_forward(r.mlp_act, r.mlp_gate, r.mlp_in);
  backend.copy(r.x, r.h);
  backend.matmul(r.x, r.mlp_act, w.wd, false, true, 1.0f, 1.0f);
  if (!w.bd.empty()) backend.bias_add(r.x, w.bd);
}

}  // namespace

const Architecture& llama_architecture() {
  static const Llama llama("llama", false, false);
  return llama;
}

std::unique_ptr<Architecture> make_llama_layer(std::string_view name, bool qkv_bias, bool qk_norm) {
  return std::make_unique<Llama>(name, qkv_bias, qk_norm);
}

}  // namespace memo
