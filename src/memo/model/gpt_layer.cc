// Implementation of model/gpt_layer.h. c_attn's weight [C, 3C] holds q | k | v in column blocks;
// each projection reads its block as a strided [C, C] view, so q, k and v are written straight
// into their saved tensors and never exist fused.
#include "memo/model/gpt_layer.h"

namespace memo {
namespace {

// Column block i (0: q, 1: k, 2: v) of c_attn's weight [C, 3C] and bias [3C].
Tensor qkv_weight(const LayerWeights& w, int i, int64_t C) {
  return w.w_qkv.slice_cols(i * C, (i + 1) * C);
}
Tensor qkv_bias(const LayerWeights& w, int i, int64_t C) {
  return w.b_qkv.slice_rows(i * C, (i + 1) * C);
}

// The per-token part of the forward on rows [r0, r1): everything but attention and the second
// c_proj. The forward calls it for all rows around attention; the recompute for a token range.
// Each product is a token-panel product over the same rows, so both give the same bits.
void attention_inputs(const SavedActs& s, int64_t r0, int64_t r1, const LayerWeights& w,
                      const LayerContext& ctx) {
  const ModelConfig& cfg = *ctx.config;
  const int64_t C = cfg.hidden_size, D = cfg.head_dim();
  auto rows = [r0, r1](const Tensor& t) { return t.slice_rows(r0, r1); };
  // q | k | v = ln_1(x) W_attn + b_attn
  ctx.backend->layernorm_forward(rows(s.xn1), rows(s.mean1), rows(s.inv_rms1), rows(s.x), w.ln1,
                                 w.ln1_b, float(cfg.rms_norm_eps));
  const Tensor* out[3] = {&s.q, &s.k, &s.v};
  {
    CommBuffer gathered(*ctx.alloc, "tp.attn_in", tp_comm_rows(ctx.parallel, r1 - r0), C);
    for (int i = 0; i < 3; ++i) {
      ctx.backend->matmul_token_panels_kn(rows(*out[i]), rows(s.xn1), qkv_weight(w, i, C));
      ctx.backend->bias_add(rows(*out[i]), qkv_bias(w, i, C));
    }
  }
  if (cfg.uses_rope()) {
    ctx.backend->rope_forward(rows(s.q), ctx.rope_cos, ctx.rope_sin, D, r0);
    ctx.backend->rope_forward(rows(s.k), ctx.rope_cos, ctx.rope_sin, D, r0);
  }
}

// h = x + attn W_o + b_o;  fc = ln_2(h) W_fc + b_fc;  act = gelu(fc), on rows [r0, r1).
void attention_outputs(const SavedActs& s, int64_t r0, int64_t r1, const LayerWeights& w,
                       const LayerContext& ctx) {
  auto rows = [r0, r1](const Tensor& t) { return t.slice_rows(r0, r1); };
  const int64_t tp_rows = tp_comm_rows(ctx.parallel, r1 - r0), C = ctx.config->hidden_size;
  ctx.backend->copy(rows(s.h), rows(s.x));
  {
    CommBuffer partial(*ctx.alloc, "tp.attn_out", tp_rows, C);
    ctx.backend->matmul_token_panels_kn(rows(s.h), rows(s.attn), w.w_attn_o, 1.0f);
  }
  ctx.backend->bias_add(rows(s.h), w.b_attn_o);
  ctx.backend->layernorm_forward(rows(s.xn2), rows(s.mean2), rows(s.inv_rms2), rows(s.h), w.ln2,
                                 w.ln2_b, float(ctx.config->rms_norm_eps));
  {
    CommBuffer gathered(*ctx.alloc, "tp.mlp_in", tp_rows, C);
    ctx.backend->matmul_token_panels_kn(rows(s.gate), rows(s.xn2), w.w_fc);
  }
  ctx.backend->bias_add(rows(s.gate), w.b_fc);
  ctx.backend->gelu_forward(rows(s.act), rows(s.gate));
}

}  // namespace

void gpt_layer_forward(Tensor y, const SavedActs& s, const LayerWeights& w,
                       const LayerContext& ctx) {
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq, H = cfg.num_attention_heads;
  // attention block: h = x + c_proj(attn(q, k, v)), q | k | v = c_attn(ln_1(x))
  attention_inputs(s, 0, T, w, ctx);
  {
    CommBuffer ring(*ctx.alloc, "cp.kv_ring", cp_comm_rows(ctx.parallel, T, 4), cfg.kv_dim());
    ScopedAct scratch(*ctx.alloc, "attn.fwd_scratch",
                      {ctx.backend->attention_forward_scratch_numel(cfg.head_dim())});
    ctx.backend->attention_forward(s.attn, s.lse, s.q, s.k, s.v, ctx.batch, H, H, *scratch);
  }
  // MLP block: y = h + c_proj(gelu(c_fc(ln_2(h))))
  attention_outputs(s, 0, T, w, ctx);
  ctx.backend->copy(y, s.h);
  CommBuffer partial(*ctx.alloc, "tp.mlp_out", tp_comm_rows(ctx.parallel, T), cfg.hidden_size);
  ctx.backend->matmul(y, s.act, w.w_mlp_o, false, false, 1.0f, 1.0f);
  ctx.backend->bias_add(y, w.b_mlp_o);
}

void gpt_layer_recompute_tokens(const SavedActs& s, int64_t r0, int64_t r1, const LayerWeights& w,
                                const LayerContext& ctx) {
  const int64_t T = ctx.batch * ctx.seq;
  check_recompute_rows("gpt_layer_recompute_tokens", r0, r1, T, ctx);
  if (r0 == r1) return;
  attention_inputs(s, r0, r1, w, ctx);
  attention_outputs(s, r0, r1, w, ctx);
}

void gpt_layer_backward(Tensor dres, const LayerWeights& dw, const SavedActs& s,
                        const LayerWeights& w, const LayerContext& ctx) {
  const ModelConfig& cfg = *ctx.config;
  const int64_t T = ctx.batch * ctx.seq, C = cfg.hidden_size, F = cfg.intermediate_size;
  const int64_t D = cfg.head_dim(), H = cfg.num_attention_heads;
  ActivationAllocator& alloc = *ctx.alloc;
  const int64_t tp_rows = tp_comm_rows(ctx.parallel, T);  // Note [Per-GPU shapes]
  // y = h + act W_p + b_p:  d act = dy W_p^T;  dW_p += act^T dy;  db_p += sum_t dy;  dh = dy + ...
  Tensor dact = alloc.acquire("mlp.dact", {T, F}, ActKind::kTransient);
  {
    CommBuffer gathered(alloc, "tp.mlp_dout", tp_rows, C);
    ctx.backend->matmul(dact, dres, w.w_mlp_o, false, true);
    ctx.backend->matmul(dw.w_mlp_o, s.act, dres, true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_mlp_o, dres);
  // act = gelu(fc)
  Tensor dfc = alloc.acquire("mlp.dfc", {T, F}, ActKind::kTransient);
  ctx.backend->gelu_backward(dfc, dact, s.gate);
  alloc.release(dact);
  // fc = xn2 W_fc + b_fc:  d xn2 = dfc W_fc^T;  dW_fc += xn2^T dfc;  db_fc += sum_t dfc
  Tensor dxn2 = alloc.acquire("mlp.dxn2", {T, C}, ActKind::kTransient);
  {
    CommBuffer partial(alloc, "tp.mlp_din", tp_rows, C);
    ctx.backend->matmul(dxn2, dfc, w.w_fc, false, true);
  }
  {
    CommBuffer gathered(alloc, "tp.mlp_in", tp_rows, C);
    ctx.backend->matmul(dw.w_fc, s.xn2, dfc, true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_fc, dfc);
  alloc.release(dfc);
  // xn2 = ln_2(h): dres becomes dL/dh
  ctx.backend->layernorm_backward(dres, dw.ln2, dw.ln2_b, dxn2, s.h, w.ln2, s.mean2, s.inv_rms2);
  alloc.release(dxn2);
  // h = x + attn W_o + b_o:  d attn = dh W_o^T;  dW_o += attn^T dh;  db_o += sum_t dh
  Tensor dattn = alloc.acquire("attn.dattn", {T, C}, ActKind::kTransient);
  {
    CommBuffer gathered(alloc, "tp.attn_dout", tp_rows, C);
    ctx.backend->matmul(dattn, dres, w.w_attn_o, false, true);
    ctx.backend->matmul(dw.w_attn_o, s.attn, dres, true, false, 1.0f, 1.0f);
  }
  ctx.backend->bias_backward(dw.b_attn_o, dres);
  // attention
  Tensor dq = alloc.acquire("attn.dq", {T, C}, ActKind::kTransient);
  Tensor dk = alloc.acquire("attn.dk", {T, C}, ActKind::kTransient);
  Tensor dv = alloc.acquire("attn.dv", {T, C}, ActKind::kTransient);
  {
    CommBuffer ring(alloc, "cp.kv_ring", cp_comm_rows(ctx.parallel, T, 8), cfg.kv_dim());
    ScopedAct scratch(alloc, "attn.bwd_scratch",
                      {ctx.backend->attention_backward_scratch_numel(ctx.seq, D, H, H)});
    ctx.backend->attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse, ctx.batch, H,
                                    H, *scratch);
  }
  alloc.release(dattn);
  if (cfg.uses_rope()) {
    ctx.backend->rope_backward(dq, ctx.rope_cos, ctx.rope_sin, D);
    ctx.backend->rope_backward(dk, ctx.rope_cos, ctx.rope_sin, D);
  }
  // q | k | v = xn1 W_attn + b_attn; per block i: d xn1 += d_i W_i^T, dW_i += xn1^T d_i,
  // db_i += sum_t d_i
  Tensor dxn1 = alloc.acquire("attn.dxn1", {T, C}, ActKind::kTransient);
  const Tensor* grads[3] = {&dq, &dk, &dv};
  {
    CommBuffer partial(alloc, "tp.attn_din", tp_rows, C);  // TP: both live across the blocks
    CommBuffer gathered(alloc, "tp.attn_in", tp_rows, C);
    for (int i = 0; i < 3; ++i) {
      ctx.backend->matmul(dxn1, *grads[i], qkv_weight(w, i, C), false, true, 1.0f,
                          i == 0 ? 0.0f : 1.0f);
      ctx.backend->matmul(qkv_weight(dw, i, C), s.xn1, *grads[i], true, false, 1.0f, 1.0f);
      ctx.backend->bias_backward(qkv_bias(dw, i, C), *grads[i]);
    }
  }
  alloc.release(dv);
  alloc.release(dk);
  alloc.release(dq);
  // xn1 = ln_1(x): dres becomes dL/dx
  ctx.backend->layernorm_backward(dres, dw.ln1, dw.ln1_b, dxn1, s.x, w.ln1, s.mean1, s.inv_rms1);
  alloc.release(dxn1);
}

}  // namespace memo
