// Tensor and context parallelism: the layout of a rank (Parallel), and the tensor-parallel
// collectives a layer runs (TpGather, TpPartial; see the Notes below).
#pragma once

#include <algorithm>
#include <cstdint>

#include "memo/backend/allocator.h"
#include "memo/parallel/communicator.h"

namespace memo {

// Note [Per-GPU shapes]
// `memo plan --gpus` plans one GPU's memory under Megatron-LM's tensor parallelism with sequence
// parallelism (t ways) and context parallelism (c ways) on one laptop: the shape-only trace (Note
// [Meta backend]) runs the very code of one rank of such a run (train/device_plan.h:
// trace_shapes_only), on a model holding the rank's parts of the parameters (Note
// [Tensor-parallel parameters] in model/params.h). The layers' tensor-parallel collectives (Note
// [TP collectives]) run over a ShapeCommunicator of t ranks and the ring of context parallelism
// over one of c ranks: groups that move nothing but count the bytes a rank would send. So the
// requests, their order, lifetimes and sizes are a real rank's (Note [Tensor-parallel
// activations]), and `memo plan --config --tp T --cp C` equals what each rank of the run
// measures (tests/parallel/tensor_parallel_test.cc). FLOPs and times come from the cost model
// (train/cluster_plan.h), never from the trace.
struct Parallel {
  int64_t tp = 1;  // tensor (and sequence) parallel ranks
  int64_t cp = 1;  // context parallel ranks (a Model takes them through set_context_parallel)
};

// Note [Tensor-parallel activations]
// The layers run Megatron-LM's tensor + sequence parallelism (model/llama.cc, model/gpt2.cc): a
// rank holds T/t of a micro-batch's T token rows of the residual stream, the norms' outputs and
// their statistics (rank r: rows [r T/t, (r + 1) T/t), in token order), and all T rows of its H/t
// query heads, Hkv/t key-value heads and F/t MLP units. Before a column-parallel product (q, k, v;
// gate, up) the normed rows are all-gathered into token order; after a row-parallel one (o, down)
// the partial sums of all T rows are reduce-scattered back to the rank's rows, and the residual
// added. The backward mirrors it. Token-wise rebuilds (memo) rebuild rows r0..r1 of the rank's
// T/t and the same rows of every group of T/t in the T-row fields (SkeletalField::row_groups):
// the gather of the normed rows r0..r1 of every rank is exactly their input. The biases of
// row-parallel products (GPT-2) are added once, to the rank's rows after the reduce-scatter;
// learned positions likewise.

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
  // out (this rank's [rows, cols]) = its share of the group's partials, summed: the layer writes
  // the partial product into sums_into(out) first.
  void reduce_scatter(Tensor out) {
    if (tp_ && out.rows() > 0) tp_->reduce_scatter_sum(out, t_);
  }

 private:
  ActivationAllocator* alloc_;
  Communicator* tp_ = nullptr;
  Tensor buffer_, t_;
};

}  // namespace memo
