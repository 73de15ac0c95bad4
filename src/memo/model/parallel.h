// Per-GPU shapes under tensor and context parallelism, for planning (see the Note below).
#pragma once

#include <algorithm>
#include <cstdint>

#include "memo/backend/allocator.h"
#include "memo/parallel/communicator.h"

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
// that leaves out are TP's collectives; the layer runs them on the context's TP group (Note [TP
// collectives]) with their buffers: the all-gathered input of each column-parallel product
// ([T/c, C]; in the forward, and again in the backward for the weight gradient) and the partial
// output of each row-parallel product before its reduce-scatter ([T/c, C]). The
// arithmetic of a rank is not the arithmetic of this layout (a rank multiplies T/c tokens by W/t
// columns), so FLOPs come from the cost model (train/cluster_plan.h), never from the trace, and a
// model with values refuses t > 1 (Model::set_parallel).
struct Parallel {
  int64_t tp = 1;  // tensor (and sequence) parallel ranks
  int64_t cp = 1;  // context parallel ranks (a Model takes them through set_context_parallel)
};

// Note [Tensor-parallel activations]
// LLaMA runs Megatron-LM's tensor + sequence parallelism with values (model/llama.cc): a rank
// holds T/t of a micro-batch's T token rows of the residual stream, the norms' outputs and their
// statistics (rank r: rows [r T/t, (r + 1) T/t), in token order), and all T rows of its H/t query
// heads, Hkv/t key-value heads and F/t MLP units. Before a column-parallel product (q, k, v;
// gate, up) the normed rows are all-gathered into token order; after a row-parallel one (o, down)
// the partial sums of all T rows are reduce-scattered back to the rank's rows, and the residual
// added. The backward mirrors it. Token-wise rebuilds (memo) rebuild rows r0..r1 of the rank's
// T/t and the same rows of every group of T/t in the T-row fields (SkeletalField::row_groups):
// the gather of the normed rows r0..r1 of every rank is exactly their input. The GPT-2 layer keeps
// the shape-only model of Note [Per-GPU shapes] and refuses values under tensor parallelism.

// Note [TP collectives]
// The tensor-parallel collectives of a layer under TP+SP, at the points Megatron-LM places them,
// each with its buffer for the scope it lives in: before a column-parallel product the ranks'
// [T', C] rows of its input are all-gathered into [t T', C] (TpGather; in the forward, and again
// in the backward for the weight gradient), and a row-parallel product's partial output [t T', C]
// is reduce-scattered into the rank's [T', C] rows (TpPartial). The group is the layer context's
// `tp` (a ShapeCommunicator of t ranks in a shape-only trace, so a plan holds the buffers and
// counts the bytes a rank would send, as context parallelism's ring does); without TP (tp null)
// there is neither buffer nor call.
class TpGather {
 public:
  // capacity_rows (>= in.rows()): a buffer for that many rows of each rank, whatever in holds (a
  // token-wise rebuild's requests then do not depend on how many rows it rebuilds).
  TpGather(ActivationAllocator& alloc, Communicator* tp, const char* name, ConstTensor in,
           DType dtype, int64_t capacity_rows = -1)
      : alloc_(tp ? &alloc : nullptr), in_(in) {
    if (!alloc_) return;
    MEMO_CHECK(in.dtype() == dtype, name, ": gathers ", dtype_name(in.dtype()), " rows into a ",
               dtype_name(dtype), " buffer");
    const int64_t capacity = std::max(capacity_rows, in.rows()) * tp->size();
    buffer_ = alloc_->acquire(name, {capacity, in.cols()}, ActKind::kTransient, dtype);
    t_ = buffer_.slice_rows(0, in.rows() * tp->size());
    if (in.rows() == 0) return;
    try {
      tp->all_gather(t_, in);
    } catch (...) {
      alloc_->release(buffer_);
      throw;
    }
  }
  ~TpGather() {
    if (alloc_) alloc_->release(buffer_);
  }
  TpGather(const TpGather&) = delete;
  TpGather& operator=(const TpGather&) = delete;
  // The group's rows in rank order ([t T', C]); `in` itself without tensor parallelism.
  ConstTensor rows() const { return alloc_ ? ConstTensor(t_) : in_; }

 private:
  ActivationAllocator* alloc_;
  ConstTensor in_;
  Tensor buffer_, t_;
};

class TpPartial {
 public:
  // A buffer for the partial sums of `rows` x `cols` rows of each rank of the group (held at
  // capacity_rows of each, as TpGather's).
  TpPartial(ActivationAllocator& alloc, Communicator* tp, const char* name, int64_t rows,
            int64_t cols, DType dtype, int64_t capacity_rows = -1)
      : alloc_(tp ? &alloc : nullptr), tp_(tp) {
    if (!alloc_) return;
    buffer_ = alloc_->acquire(name, {std::max(capacity_rows, rows) * tp->size(), cols},
                              ActKind::kTransient, dtype);
    t_ = buffer_.slice_rows(0, rows * tp->size());
  }
  ~TpPartial() {
    if (alloc_) alloc_->release(buffer_);
  }
  TpPartial(const TpPartial&) = delete;
  TpPartial& operator=(const TpPartial&) = delete;
  // Where the product's partial sums go: the buffer ([t rows, cols]), or `out` itself without
  // tensor parallelism (where the product is the whole sum).
  Tensor sums_into(Tensor out) const { return tp_ ? t_ : out; }
  // out (this rank's [rows, cols]) = its share of the group's partials, summed. In a shape-only
  // trace the modelled layer writes its product straight into `out` (Note [Per-GPU shapes]), so
  // the buffer holds nothing; a layer with values must write the partial product into it.
  void reduce_scatter(Tensor out) {
    if (tp_ && out.rows() > 0) tp_->reduce_scatter_sum(out, t_);
  }

 private:
  ActivationAllocator* alloc_;
  Communicator* tp_ = nullptr;
  Tensor buffer_, t_;
};

}  // namespace memo
