#include "memo/model/layer.h"

#include <algorithm>
#include <iterator>

#include "memo/model/gpt_layer.h"

namespace memo {
namespace {

constexpr SavedField kLlamaSavedFields[] = {
    {"x", &SavedActs::x, false},
    {"xn1", &SavedActs::xn1, true},
    {"inv_rms1", &SavedActs::inv_rms1, true},
    {"q", &SavedActs::q, true},
    {"k", &SavedActs::k, true},
    {"v", &SavedActs::v, true},
    {"attn", &SavedActs::attn, false},
    {"lse", &SavedActs::lse, false},
    {"h", &SavedActs::h, true},
    {"xn2", &SavedActs::xn2, true},
    {"inv_rms2", &SavedActs::inv_rms2, true},
    {"gate", &SavedActs::gate, true},
    {"up", &SavedActs::up, true},
    {"act", &SavedActs::act, true},
};

// ln_1 and ln_2 save mean and rstd; the MLP saves c_fc's output and its GELU.
constexpr SavedField kGptSavedFields[] = {
    {"x", &SavedActs::x, false},
    {"xn1", &SavedActs::xn1, true},
    {"mean1", &SavedActs::mean1, true},
    {"rstd1", &SavedActs::inv_rms1, true},
    {"q", &SavedActs::q, true},
    {"k", &SavedActs::k, true},
    {"v", &SavedActs::v, true},
    {"attn", &SavedActs::attn, false},
    {"lse", &SavedActs::lse, false},
    {"h", &SavedActs::h, true},
    {"xn2", &SavedActs::xn2, true},
    {"mean2", &SavedActs::mean2, true},
    {"rstd2", &SavedActs::inv_rms2, true},
    {"fc", &SavedActs::gate, true},
    {"act", &SavedActs::act, true},
};
static_assert(std::size(kGptSavedFields) <= size_t(kNumSavedFields) &&
              std::size(kLlamaSavedFields) <= size_t(kNumSavedFields));

}  // namespace

std::span<const SavedField> saved_fields(const ModelConfig& config) {
  if (config.is_gpt2()) return kGptSavedFields;
  return kLlamaSavedFields;
}

Shape saved_shape(const SavedField& field, const ModelConfig& config, int64_t batch, int64_t seq) {
  const int64_t T = batch * seq, C = config.hidden_size, F = config.intermediate_size;
  const int64_t QD = config.num_attention_heads * config.head_dim(), KD = config.kv_dim();
  const std::string_view n = field.name;
  if (n == "x" || n == "xn1" || n == "h" || n == "xn2") return {T, C};
  if (n == "inv_rms1" || n == "inv_rms2" || n == "rstd1" || n == "rstd2" || n == "mean1" ||
      n == "mean2")
    return {T};
  if (n == "q" || n == "attn") return {T, QD};
  if (n == "k" || n == "v") return {T, KD};
  if (n == "lse") return {batch, config.num_attention_heads, seq};
  return {T, F};  // gate, up, act, fc
}

int64_t saved_acts_bytes(const ModelConfig& config, int64_t batch, int64_t seq) {
  int64_t bytes = 0;
  for (const SavedField& f : saved_fields(config))
    bytes += saved_shape(f, config, batch, seq).numel() * int64_t(sizeof(float));
  return bytes;
}

bool activation_stays_fp32(std::string_view name) {
  static constexpr std::string_view kFp32[] = {"inv_rms1",
                                               "inv_rms2",
                                               "mean1",
                                               "rstd1",
                                               "mean2",
                                               "rstd2",
                                               "lse",
                                               "final.inv_rms",
                                               "head.logits",
                                               "head.losses",
                                               "attn.fwd_scratch",
                                               "attn.bwd_scratch"};
  return std::find(std::begin(kFp32), std::end(kFp32), name) != std::end(kFp32);
}

// The per-token products go through matmul_token_panels so layer_recompute_tokens can rebuild any
// panel-aligned token range exactly; the down projection is never rebuilt and takes one call.
void layer_forward(Tensor y, const SavedActs& s, const LayerWeights& w, const LayerContext& ctx) {
  if (ctx.config->is_gpt2()) return gpt_layer_forward(y, s, w, ctx);
  const ModelConfig& cfg = *ctx.config;
  const int64_t D = cfg.head_dim();
  const float eps = float(cfg.rms_norm_eps);
  // attention block: h = x + o_proj(attn(rope(q_proj(xn1)), rope(k_proj(xn1)), v_proj(xn1)))
  const int64_t T = ctx.batch * ctx.seq, C = cfg.hidden_size;
  const int64_t tp_rows = tp_comm_rows(ctx.parallel, T);  // Note [Per-GPU shapes]
  ctx.backend->rmsnorm_forward(s.xn1, s.inv_rms1, s.x, w.ln1, eps);
  {
    CommBuffer gathered(*ctx.alloc, "tp.attn_in", tp_rows, C);
    ctx.backend->matmul_token_panels(s.q, s.xn1, w.wq);
    ctx.backend->matmul_token_panels(s.k, s.xn1, w.wk);
    ctx.backend->matmul_token_panels(s.v, s.xn1, w.wv);
  }
  ctx.backend->rope_forward(s.q, ctx.rope_cos, ctx.rope_sin, D);
  ctx.backend->rope_forward(s.k, ctx.rope_cos, ctx.rope_sin, D);
  {
    CommBuffer ring(*ctx.alloc, "cp.kv_ring", cp_comm_rows(ctx.parallel, T, 4), cfg.kv_dim());
    ScopedAct scratch(*ctx.alloc, "attn.fwd_scratch",
                      {ctx.backend->attention_forward_scratch_numel(D)});
    ctx.backend->attention_forward(s.attn, s.lse, s.q, s.k, s.v, ctx.batch, cfg.num_attention_heads,
                                   cfg.num_key_value_heads, *scratch);
  }
  ctx.backend->copy(s.h, s.x);
  {
    CommBuffer partial(*ctx.alloc, "tp.attn_out", tp_rows, C);
    ctx.backend->matmul_token_panels(s.h, s.attn, w.wo, 1.0f);
  }
  // MLP block: y = h + down_proj(silu(gate_proj(xn2)) * up_proj(xn2))
  ctx.backend->rmsnorm_forward(s.xn2, s.inv_rms2, s.h, w.ln2, eps);
  {
    CommBuffer gathered(*ctx.alloc, "tp.mlp_in", tp_rows, C);
    ctx.backend->matmul_token_panels(s.gate, s.xn2, w.wg);
    ctx.backend->matmul_token_panels(s.up, s.xn2, w.wu);
  }
  ctx.backend->swiglu_forward(s.act, s.gate, s.up);
  ctx.backend->copy(y, s.h);
  CommBuffer partial(*ctx.alloc, "tp.mlp_out", tp_rows, C);
  ctx.backend->matmul(y, s.act, w.wd, false, true, 1.0f, 1.0f);
}

void check_recompute_rows(const char* fn, int64_t r0, int64_t r1, int64_t T,
                          const LayerContext& ctx) {
  const int64_t g = ctx.backend->reproducible_rows();
  MEMO_CHECK(0 <= r0 && r0 <= r1 && r1 <= T && (g == 0 || r0 % g == 0 || r0 == r1), fn, ": rows [",
             r0, ", ", r1, ") of ", T, " tokens (need a range starting on a multiple of ", g,
             ", the ", ctx.backend->name(), " backend's reproducible rows)");
}

// layer_forward without attention and the down projection, on rows [r0, r1) of each tensor.
void layer_recompute_tokens(const SavedActs& s, int64_t r0, int64_t r1, const LayerWeights& w,
                            const LayerContext& ctx) {
  if (ctx.config->is_gpt2()) return gpt_layer_recompute_tokens(s, r0, r1, w, ctx);
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq, D = cfg.head_dim();
  check_recompute_rows("layer_recompute_tokens", r0, r1, T, ctx);
  if (r0 == r1) return;
  const float eps = float(cfg.rms_norm_eps);
  auto rows = [r0, r1](const Tensor& t) { return t.slice_rows(r0, r1); };
  // Under TP the rebuilt rows need the forward's collectives on those rows (Note [Per-GPU shapes])
  const int64_t tp_rows = tp_comm_rows(ctx.parallel, r1 - r0), C = cfg.hidden_size;
  ctx.backend->rmsnorm_forward(rows(s.xn1), rows(s.inv_rms1), rows(s.x), w.ln1, eps);
  {
    CommBuffer gathered(*ctx.alloc, "tp.attn_in", tp_rows, C);
    ctx.backend->matmul_token_panels(rows(s.q), rows(s.xn1), w.wq);
    ctx.backend->matmul_token_panels(rows(s.k), rows(s.xn1), w.wk);
    ctx.backend->matmul_token_panels(rows(s.v), rows(s.xn1), w.wv);
  }
  ctx.backend->rope_forward(rows(s.q), ctx.rope_cos, ctx.rope_sin, D, r0);
  ctx.backend->rope_forward(rows(s.k), ctx.rope_cos, ctx.rope_sin, D, r0);
  ctx.backend->copy(rows(s.h), rows(s.x));
  {
    CommBuffer partial(*ctx.alloc, "tp.attn_out", tp_rows, C);
    ctx.backend->matmul_token_panels(rows(s.h), rows(s.attn), w.wo, 1.0f);
  }
  ctx.backend->rmsnorm_forward(rows(s.xn2), rows(s.inv_rms2), rows(s.h), w.ln2, eps);
  {
    CommBuffer gathered(*ctx.alloc, "tp.mlp_in", tp_rows, C);
    ctx.backend->matmul_token_panels(rows(s.gate), rows(s.xn2), w.wg);
    ctx.backend->matmul_token_panels(rows(s.up), rows(s.xn2), w.wu);
  }
  ctx.backend->swiglu_forward(rows(s.act), rows(s.gate), rows(s.up));
}

void layer_backward(Tensor dres, const LayerWeights& dw, const SavedActs& s, const LayerWeights& w,
                    const LayerContext& ctx) {
  if (ctx.config->is_gpt2()) return gpt_layer_backward(dres, dw, s, w, ctx);
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq, C = cfg.hidden_size, F = cfg.intermediate_size;
  const int64_t D = cfg.head_dim(), QD = cfg.num_attention_heads * D, KD = cfg.kv_dim();
  ActivationAllocator& alloc = *ctx.alloc;
  const int64_t tp_rows = tp_comm_rows(ctx.parallel, T);  // Note [Per-GPU shapes]
  // y = h + act Wd^T:  d act = dy Wd;  dWd += dy^T act;  dh = dy (+ the norm branch below)
  Tensor dact = alloc.acquire("mlp.dact", {T, F}, ActKind::kTransient);
  {
    CommBuffer gathered(alloc, "tp.mlp_dout", tp_rows, C);
    ctx.backend->matmul(dact, dres, w.wd, false, false);
    ctx.backend->matmul(dw.wd, dres, s.act, true, false, 1.0f, 1.0f);
  }
  // act = silu(gate) * up
  Tensor dgate = alloc.acquire("mlp.dgate", {T, F}, ActKind::kTransient);
  Tensor dup = alloc.acquire("mlp.dup", {T, F}, ActKind::kTransient);
  ctx.backend->swiglu_backward(dgate, dup, dact, s.gate, s.up);
  alloc.release(dact);
  // gate = xn2 Wg^T, up = xn2 Wu^T
  Tensor dxn2 = alloc.acquire("mlp.dxn2", {T, C}, ActKind::kTransient);
  {
    CommBuffer partial(alloc, "tp.mlp_din", tp_rows, C);
    ctx.backend->matmul(dxn2, dgate, w.wg, false, false);
    ctx.backend->matmul(dxn2, dup, w.wu, false, false, 1.0f, 1.0f);
  }
  {
    CommBuffer gathered(alloc, "tp.mlp_in", tp_rows, C);
    ctx.backend->matmul(dw.wg, dgate, s.xn2, true, false, 1.0f, 1.0f);
    ctx.backend->matmul(dw.wu, dup, s.xn2, true, false, 1.0f, 1.0f);
  }
  alloc.release(dup);
  alloc.release(dgate);
  // xn2 = rmsnorm(h): dres becomes dL/dh
  ctx.backend->rmsnorm_backward(dres, dw.ln2, dxn2, s.h, w.ln2, s.inv_rms2);
  alloc.release(dxn2);
  // h = x + attn Wo^T:  d attn = dh Wo;  dWo += dh^T attn
  Tensor dattn = alloc.acquire("attn.dattn", {T, QD}, ActKind::kTransient);
  {
    CommBuffer gathered(alloc, "tp.attn_dout", tp_rows, C);
    ctx.backend->matmul(dattn, dres, w.wo, false, false);
    ctx.backend->matmul(dw.wo, dres, s.attn, true, false, 1.0f, 1.0f);
  }
  // attention
  Tensor dq = alloc.acquire("attn.dq", {T, QD}, ActKind::kTransient);
  Tensor dk = alloc.acquire("attn.dk", {T, KD}, ActKind::kTransient);
  Tensor dv = alloc.acquire("attn.dv", {T, KD}, ActKind::kTransient);
  {
    CommBuffer ring(alloc, "cp.kv_ring", cp_comm_rows(ctx.parallel, T, 8), KD);
    ScopedAct scratch(alloc, "attn.bwd_scratch",
                      {ctx.backend->attention_backward_scratch_numel(
                          ctx.seq, D, cfg.num_attention_heads, cfg.num_key_value_heads)});
    ctx.backend->attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse, ctx.batch,
                                    cfg.num_attention_heads, cfg.num_key_value_heads, *scratch);
  }
  alloc.release(dattn);
  ctx.backend->rope_backward(dq, ctx.rope_cos, ctx.rope_sin, D);
  ctx.backend->rope_backward(dk, ctx.rope_cos, ctx.rope_sin, D);
  // q, k, v = xn1 W^T
  Tensor dxn1 = alloc.acquire("attn.dxn1", {T, C}, ActKind::kTransient);
  {
    CommBuffer partial(alloc, "tp.attn_din", tp_rows, C);
    ctx.backend->matmul(dxn1, dq, w.wq, false, false);
    ctx.backend->matmul(dxn1, dk, w.wk, false, false, 1.0f, 1.0f);
    ctx.backend->matmul(dxn1, dv, w.wv, false, false, 1.0f, 1.0f);
  }
  {
    CommBuffer gathered(alloc, "tp.attn_in", tp_rows, C);
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

}  // namespace memo
