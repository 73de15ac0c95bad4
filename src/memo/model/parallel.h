// Per-GPU shapes under tensor and context parallelism, for planning (see the Note below).
#pragma once

#include <cstdint>

#include "memo/backend/allocator.h"

namespace memo {

// Note [Per-GPU shapes]
// memo runs data and context parallelism (train/, model/context_parallel.h) but not yet tensor
// parallelism, and `memo plan --gpus` plans layouts on one laptop. To plan one GPU's memory under
// Megatron-LM's tensor parallelism with sequence parallelism (t ways) and context parallelism
// (c ways), the shape-only trace (Note [Meta backend]) runs the layer as one rank holds it.
// Context parallelism is the real code: the trace's model splits each sequence of S/t tokens over
// a ShapeCommunicator of c ranks (train/device_plan.h: trace_shapes_only), so its ring buffers,
// block temporaries and the bytes it would send are those of a real --cp run's rank. Tensor
// parallelism is modelled: under TP+SP every activation of a rank is one t-th of the unsharded
// tensor (the norm and residual tensors hold T/t tokens of width C, the column- and row-parallel
// ones T tokens of width W/t); both kinds have the bytes of T/t tokens at the unsharded width, so
// the layer runs at T/t tokens (T/(t c) on a context-parallel rank) with the unsharded widths:
// the same requests, in the same order, with the same lifetimes and sizes as the rank's. What
// that leaves out are TP's communication buffers; the layer requests them explicitly
// (CommBuffer), where Megatron-LM holds them: the all-gathered input of each column-parallel
// product ([T/c, C]; in the forward, and again in the backward for the weight gradient) and the
// partial output of each row-parallel product before its reduce-scatter ([T/c, C]). The
// arithmetic of a rank is not the arithmetic of this layout (a rank multiplies T/c tokens by W/t
// columns), so FLOPs come from the cost model (train/cluster_plan.h), never from the trace, and a
// model with values refuses t > 1 (Model::set_parallel).
struct Parallel {
  int64_t tp = 1;  // tensor (and sequence) parallel ranks
  int64_t cp = 1;  // context parallel ranks (a Model takes them through set_context_parallel)
};

// A communication buffer of `rows` x `cols` for the scope it lives in; nothing when rows is 0
// (t = 1, the only case that runs with values).
class CommBuffer {
 public:
  CommBuffer(ActivationAllocator& alloc, const char* name, int64_t rows, int64_t cols, DType dtype)
      : alloc_(rows > 0 ? &alloc : nullptr) {
    if (alloc_) t_ = alloc_->acquire(name, {rows, cols}, ActKind::kTransient, dtype);
  }
  ~CommBuffer() {
    if (alloc_) alloc_->release(t_);
  }
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;

 private:
  ActivationAllocator* alloc_;
  Tensor t_;
};

// Rows of a TP communication buffer for a layer running `tokens` (= T/(t c)) tokens: T/c under
// TP, none without it.
inline int64_t tp_comm_rows(const Parallel& p, int64_t tokens) {
  return p.tp > 1 ? tokens * p.tp : 0;
}

}  // namespace memo
