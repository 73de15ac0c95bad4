// Context parallelism (issue #11): the sequences of a micro-batch split over the ranks of a group,
// attention computed by passing keys and values round a ring. Everything else in a layer works
// token by token and runs unchanged on a rank's share of the tokens.
#pragma once

#include <cstdint>

#include "memo/backend/backend.h"
#include "memo/core/tensor.h"
#include "memo/parallel/communicator.h"

namespace memo {

struct LayerContext;

// Note [Context parallel layout]
// With c ranks, each sequence of S tokens is cut into 2c chunks of n = S / (2c); rank r holds
// chunks r and 2c-1-r, so every rank has the same share of the causal attention's work (an early
// chunk sees few keys, its partner many). A rank's token rows are chunk-major: slot 0 (chunk r) of
// every sequence, then slot 1 (chunk 2c-1-r): row sl*B*n + b*n + t is position chunk(sl)*n + t of
// sequence b. Both slots of all B sequences are then two contiguous [B*n, *] blocks, each a batch
// of B sequences of n tokens for the attention kernels, and [2B*n, *] as a whole is a batch of 2B
// chunks. RoPE rotates each row by its true position, learned positions add theirs.
//
// Attention (forward): step 0 computes each local chunk causally over itself and slot 1 over slot
// 0 (an earlier chunk: every key visible); then c - 1 times the keys and values (one buffer,
// [k; v]) pass to rank r+1 while those of rank r-1 arrive, and the local queries attend to every
// arrived chunk that lies before them (slot 1 over the sender's slot 0 always, plus slot 0 over
// the sender's slot 0 when the sender is an earlier rank, or slot 1 over its slot 1 when a later
// one: two block pairs per step on every rank). Partial outputs merge by their log-sum-exp
// (Backend::attention_merge). Backward: the same pairs in the same order with the global o and
// lse; [k; v; dk; dv] travel, each rank adding its queries' dK, dV into the travelling block, and
// a last pass sends every dK, dV home. Per layer and micro-batch a rank sends (c - 1) x 2 blocks
// of [2B*n, Hkv*D] forward and (c - 1) x 4 + 2 backward (recompute strategies re-run the forward's
// share). The result equals one process's within fp32 rounding: the softmax sums the same terms in
// another grouping (tests/parallel/context_parallel_test.cc bounds it).
struct ContextParallel {
  Communicator* group = nullptr;  // the ranks that share each sequence, in chunk order
  int64_t seq = 0;                // S, the whole sequence's length
  int ranks() const { return group->size(); }
  int rank() const { return group->rank(); }
  int64_t chunk_len() const { return seq / (2 * ranks()); }
  // The chunk (0 .. 2c-1) that slot 0 or 1 of this rank holds.
  int64_t chunk(int slot) const { return slot == 0 ? rank() : 2 * ranks() - 1 - rank(); }
};

// Throws ConfigError unless S splits into 2c equal chunks.
void check_context_parallel_seq(int64_t seq, int ranks);

// This rank's rows (chunk-major, above) of a [batch, cp.seq] micro-batch of token ids: local has
// batch * seq / c entries.
void context_parallel_tokens(int32_t* local, const int32_t* full, int64_t batch,
                             const ContextParallel& cp);

// Rotary embedding of local rows [first_row, first_row + x.rows()) by their true positions: cos
// and sin are the tables of the whole sequence ([S, D/2]). backward: the transposed rotation.
void context_parallel_rope(Backend& backend, Tensor x, ConstTensor cos, ConstTensor sin,
                           int64_t head_dim, int64_t first_row, int64_t batch,
                           const ContextParallel& cp, bool backward);

// The layer's causal self-attention over the whole sequences, on this rank's rows: o [T, H*D],
// lse [B, H, 2n] (read as [2B, H, n], chunk-major), q [T, H*D], k, v [T, Hkv*D], T = 2B*n.
// Transients come from ctx.alloc; every rank of ctx.cp's group calls it at the same point.
void ring_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx);
// dq, dk, dv (overwritten) from dout and the forward's o and lse.
void ring_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                             ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                             int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx);

}  // namespace memo
