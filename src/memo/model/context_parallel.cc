#include "memo/model/context_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/model/architecture.h"

namespace memo {
namespace {

// The views of one layer's ring attention (Note [Context parallel layout]).
struct Ring {
  const ContextParallel& cp;
  Backend& be;
  int64_t B, n, H, Hkv;
  int64_t rows() const { return B * n; }  // one slot's rows
  int next() const { return (cp.rank() + 1) % cp.ranks(); }
  int prev() const { return (cp.rank() + cp.ranks() - 1) % cp.ranks(); }
  // The sender of the block held after `step` passes.
  int source(int step) const { return (cp.rank() - step + cp.ranks()) % cp.ranks(); }
  // The chunk that slot sl of rank j holds.
  int64_t chunk_of(int j, int sl) const { return sl == 0 ? j : 2 * cp.ranks() - 1 - j; }
  template <class T>  // Tensor or ConstTensor
  T slot(const T& x, int sl) const {
    return x.slice_rows(sl * rows(), (sl + 1) * rows());
  }
  // Slot sl's log-sum-exp [B, H, n] inside the chunk-major [2B, H, n].
  template <class T>
  T lse_slot(const T& lse, int sl) const {
    return lse.part(sl * B * H * n, {B, H, n});
  }
};

// The block pairs of the step whose keys came from rank j (j != this rank): (query slot, key
// slot) with the key chunk wholly before the query chunk.
template <class F>
void visible_pairs(int j, int rank, F&& pair) {
  pair(1, 0);  // chunk 2c-1-r over chunk j: always later
  if (j < rank)
    pair(0, 0);  // chunk r over chunk j < r
  else
    pair(1, 1);  // chunk 2c-1-r over chunk 2c-1-j < 2c-1-r
}

// The ring of one layer's attention on this rank, after checking q is its 2 x B x n rows.
Ring layer_ring(const char* fn, ConstTensor q, int64_t n_heads, int64_t n_kv_heads,
                const LayerContext& ctx) {
  const Ring r{*ctx.cp, *ctx.backend, ctx.batch, ctx.cp->chunk_len(), n_heads, n_kv_heads};
  MEMO_CHECK(q.rows() == 2 * r.rows() && ctx.seq == 2 * r.n, fn, ": q ", q.shape(), " is not 2 x ",
             ctx.batch, " x ", r.n, " rows");
  return r;
}

// The mask of query slot q_slot over the keys of chunk key_chunk (wholly before it), from the
// documents and the sliding window (attention_key_start); `skip` when no row sees any of those
// keys, so the pair adds nothing (key_start is non-decreasing: a sequence's first row starts
// earliest).
struct PairMask {
  std::vector<int32_t> key_start;
  AttnMask mask = AttnMask::kFull;
  bool skip = false;
};
PairMask pair_mask(const Ring& r, const LayerContext& ctx, int q_slot, int64_t key_chunk) {
  PairMask m;
  if (!attention_key_start(m.key_start, ctx, r.cp.chunk(q_slot) * r.n, r.n, key_chunk * r.n))
    return m;
  m.mask = AttnMask::full_from(host_view(m.key_start));
  m.skip = true;
  for (int64_t b = 0; b < r.B; ++b) m.skip = m.skip && m.key_start[size_t(b * r.n)] >= r.n;
  return m;
}

// The mask of step 0's call: each slot's chunk over itself (causal), the 2B sequences slot-major.
AttnMask own_chunks_mask(std::vector<int32_t>& key_start, const Ring& r, const LayerContext& ctx) {
  for (int sl = 0; sl < 2; ++sl)
    if (!attention_key_start(key_start, ctx, r.cp.chunk(sl) * r.n, r.n, r.cp.chunk(sl) * r.n))
      return AttnMask::kCausal;
  return AttnMask::causal_from(host_view(key_start));
}

}  // namespace

void check_context_parallel_seq(int64_t seq, int ranks) {
  const int64_t chunks = 2 * int64_t(ranks);
  if (ranks > 1 && seq % chunks != 0)
    throw ConfigError(str("--seq ", seq, " does not split into ", chunks,
                          " equal chunks for context parallelism over ", ranks,
                          " ranks (each holds 2); use a multiple of ", chunks));
}

void context_parallel_tokens(int32_t* local, const int32_t* full, int64_t batch,
                             const ContextParallel& cp) {
  const int64_t n = cp.chunk_len();
  for (int sl = 0; sl < 2; ++sl)
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(full + b * cp.seq + cp.chunk(sl) * n, n, local + (sl * batch + b) * n);
}

void context_parallel_rope(Backend& backend, Tensor x, ConstTensor cos, ConstTensor sin,
                           int64_t head_dim, int64_t first_row, int64_t batch,
                           const ContextParallel& cp, bool backward) {
  const int64_t n = cp.chunk_len(), slot_rows = batch * n;
  const int64_t end = first_row + x.rows();
  for (int sl = 0; sl < 2; ++sl) {
    const int64_t r0 = std::max(first_row, sl * slot_rows),
                  r1 = std::min(end, (sl + 1) * slot_rows);
    if (r0 >= r1) continue;
    const int64_t c0 = cp.chunk(sl) * n;
    const ConstTensor c = cos.slice_rows(c0, c0 + n), s = sin.slice_rows(c0, c0 + n);
    const Tensor rows = x.slice_rows(r0 - first_row, r1 - first_row);
    // row sl*B*n + b*n + t is at t of its chunk: (r0 - sl*B*n + i) % n
    if (backward)
      backend.rope_backward(rows, c, s, head_dim, r0 - sl * slot_rows);
    else
      backend.rope_forward(rows, c, s, head_dim, r0 - sl * slot_rows);
  }
}

void ring_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx) {
  const ContextParallel& cp = *ctx.cp;
  const Ring r = layer_ring("ring_attention_forward", q, n_heads, n_kv_heads, ctx);
  const int64_t T = 2 * r.rows(), KD = k.cols(), D = q.cols() / n_heads;
  ActivationAllocator& alloc = *ctx.alloc;
  const Tensor lse3 = lse.reshape({2 * r.B, r.H, r.n});
  ScopedAct scratch(alloc, "attn.fwd_scratch",
                    {r.be.attention_forward_scratch_numel(r.n, D, r.H, r.Hkv)}, DType::kF32);
  // step 0: each chunk over itself, then slot 1 over slot 0
  std::vector<int32_t> own_start;
  r.be.attention_forward(o, lse3, q, k, v, 2 * r.B, r.H, r.Hkv, *scratch,
                         own_chunks_mask(own_start, r, ctx));
  ScopedAct o_part(alloc, "cp.o_part", {r.rows(), q.cols()}, ctx.act);
  ScopedAct lse_part(alloc, "cp.lse_part", {r.B, r.H, r.n}, DType::kF32);
  auto pair = [&](int q_slot, int64_t key_chunk, ConstTensor kk, ConstTensor vv) {
    const PairMask m = pair_mask(r, ctx, q_slot, key_chunk);
    if (m.skip) return;
    r.be.attention_forward(*o_part, *lse_part, r.slot(q, q_slot), kk, vv, r.B, r.H, r.Hkv, *scratch,
                           m.mask);
    r.be.attention_merge(r.slot(o, q_slot), r.lse_slot(lse3, q_slot), *o_part, *lse_part);
  };
  pair(1, cp.chunk(0), r.slot(k, 0), r.slot(v, 0));
  // the ring: [k; v] of the rank `step` places back
  ScopedAct held(alloc, "cp.kv_ring", {2 * T, KD}, ctx.act);
  ScopedAct arriving(alloc, "cp.kv_ring_next", {2 * T, KD}, ctx.act);
  Tensor cur = *held, next = *arriving;
  r.be.copy(cur.slice_rows(0, T), k);
  r.be.copy(cur.slice_rows(T, 2 * T), v);
  for (int step = 1; step < cp.ranks(); ++step) {
    cp.group->send_recv(cur, r.next(), next, r.prev());
    std::swap(cur, next);
    const Tensor kc = cur.slice_rows(0, T), vc = cur.slice_rows(T, 2 * T);
    const int j = r.source(step);
    visible_pairs(j, cp.rank(), [&](int q_slot, int k_slot) {
      pair(q_slot, r.chunk_of(j, k_slot), r.slot(kc, k_slot), r.slot(vc, k_slot));
    });
  }
}

void ring_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                             ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                             int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx) {
  const ContextParallel& cp = *ctx.cp;
  const Ring r = layer_ring("ring_attention_backward", q, n_heads, n_kv_heads, ctx);
  const int64_t T = 2 * r.rows(), KD = k.cols(), D = q.cols() / n_heads;
  ActivationAllocator& alloc = *ctx.alloc;
  const ConstTensor lse3 = lse.reshape({2 * r.B, r.H, r.n});
  // the travelling block [k; v; dk; dv] of the rank `step` places back
  ScopedAct held(alloc, "cp.kv_ring", {4 * T, KD}, ctx.act);
  ScopedAct arriving(alloc, "cp.kv_ring_next", {4 * T, KD}, ctx.act);
  Tensor cur = *held, next = *arriving;
  auto part = [T](const Tensor& block, int i) { return block.slice_rows(i * T, (i + 1) * T); };
  r.be.copy(part(cur, 0), k);
  r.be.copy(part(cur, 1), v);
  ScopedAct scratch(alloc, "attn.bwd_scratch",
                    {r.be.attention_backward_scratch_numel(r.n, D, r.H, r.Hkv)}, DType::kF32);
  // step 0: each chunk over itself writes dq and the block's own dk, dv
  std::vector<int32_t> own_start;
  r.be.attention_backward(dq, part(cur, 2), part(cur, 3), dout, q, k, v, o, lse3, 2 * r.B, r.H,
                          r.Hkv, *scratch, own_chunks_mask(own_start, r, ctx));
  ScopedAct dq_part(alloc, "cp.dq_part", {r.rows(), q.cols()}, ctx.act);
  ScopedAct dk_part(alloc, "cp.dk_part", {r.rows(), KD}, ctx.act);
  ScopedAct dv_part(alloc, "cp.dv_part", {r.rows(), KD}, ctx.act);
  auto pair = [&](int q_slot, int k_slot, int64_t key_chunk, const Tensor& block) {
    const PairMask m = pair_mask(r, ctx, q_slot, key_chunk);
    if (m.skip) return;
    r.be.attention_backward(*dq_part, *dk_part, *dv_part, r.slot(dout, q_slot), r.slot(q, q_slot),
                            r.slot(ConstTensor(part(block, 0)), k_slot),
                            r.slot(ConstTensor(part(block, 1)), k_slot), r.slot(o, q_slot),
                            r.lse_slot(lse3, q_slot), r.B, r.H, r.Hkv, *scratch, m.mask);
    r.be.add_into(r.slot(dq, q_slot), *dq_part);
    r.be.add_into(r.slot(part(block, 2), k_slot), *dk_part);
    r.be.add_into(r.slot(part(block, 3), k_slot), *dv_part);
  };
  pair(1, 0, cp.chunk(0), cur);
  for (int step = 1; step < cp.ranks(); ++step) {
    cp.group->send_recv(cur, r.next(), next, r.prev());
    std::swap(cur, next);
    const int j = r.source(step);
    visible_pairs(j, cp.rank(), [&](int q_slot, int k_slot) {
      pair(q_slot, k_slot, r.chunk_of(j, k_slot), cur);
    });
  }
  // the block held now is rank r+1's: its dK, dV go home, and this rank's arrive
  if (cp.ranks() > 1) {
    cp.group->send_recv(cur.slice_rows(2 * T, 4 * T), r.next(), next.slice_rows(2 * T, 4 * T),
                        r.prev());
    std::swap(cur, next);
  }
  r.be.copy(dk, part(cur, 2));
  r.be.copy(dv, part(cur, 3));
}

}  // namespace memo
