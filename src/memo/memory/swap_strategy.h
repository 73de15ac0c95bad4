// The swap scheduler behind the offload and memo strategies: two rounding buffers, a ring of three
// layer inputs, a host pool, and the device-to-host and host-to-device copy streams with their
// events (DESIGN.md sections 2 and 5; the MEMO paper, arXiv 2407.12117, sections 4.1 and 4.3.4).
// Of each layer below the top two
// (of every layer of a parked micro-batch: Note [Parked micro-batches] in swap_strategy.cc),
// x, attn and lse go to the host whole; of every per-token field the first `offload_rows` token
// rows go to the host and the rest are rebuilt before the backward by
// LayerRunner::recompute_tokens. Subclasses choose offload_rows (offload: all; memo: the alpha
// policy). See Note [Rounding buffers] in swap_strategy.cc.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/memory_space.h"
#include "memo/memory/strategy.h"

namespace memo {

struct SwapOptions {
  int64_t host_memory_bytes = 0;  // host pool budget (0: unlimited)
  // A host pool shared with other strategies, in place of one of host_memory_bytes: a pipeline
  // stage's micro-batches in flight share one budget. Must outlive the strategy.
  MemorySpace* host_space = nullptr;
  StreamOptions copy;  // both streams: bandwidth throttle, test delays
  // Test/debug: fill every device buffer with NaN when it is handed back for reuse, so a copy that
  // had not finished or a row nobody rebuilt poisons the result.
  bool poison_released = false;
};

// Profile of the first training micro-batch (memo's cost-model inputs).
struct SwapProfile {
  bool valid = false;
  double layer_forward_s = 0.0;  // mean over layers, waits on copies excluded
  double d2h_bytes_per_s = 0.0;  // 0 when nothing was copied
};

// Host bytes of one offloaded layer: x, attn and lse whole and the first `offload_rows` token
// rows of every per-token field, each rounded up to 64 bytes.
int64_t swap_host_layer_bytes(const SkeletalLayout& layout, int64_t batch, int64_t seq,
                              int64_t offload_rows);

class SwapStrategy : public ActivationStrategy {
 public:
  SwapStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc,
               const SwapOptions& options);
  ~SwapStrategy() override;

  void begin_step(int64_t batch, int64_t seq) override;
  void bind_layers(const LayerRunner& layers) override;
  const SavedActs& forward_slot(int layer) override;
  void forward_done(int layer) override;
  const SavedActs& backward_ready(int layer) override;
  void backward_done(int layer) override;
  void discard(int layer) override;
  void park() override;
  // this strategy's pool, or the shared one's (SwapOptions::host_space)
  int64_t host_peak_bytes() const override { return host_ ? host_->peak_bytes() : 0; }
  CopyTime copy_time() const override;

  int64_t offload_rows() const { return offload_rows_; }  // of the current micro-batch shape
  // Host bytes this shape needs: offloaded_layers() layers of swap_host_layer_bytes.
  int64_t planned_host_bytes(int64_t batch, int64_t seq, int64_t offload_rows) const;
  // Layers the micro-batch sends to the host: L - 2 of a whole model; a pipeline chunk's layers
  // less its top two, or all of them when parked (Note [Parked micro-batches]).
  int offloaded_layers() const { return std::max(0, batch_ > 0 ? offload_end_ - first_ : L_ - 2); }
  const SwapProfile& profile() const { return profile_; }

 protected:
  // Token rows of each per-token field to offload for this shape, in [0, T]; called by begin_step.
  // Rows below T must be a multiple of the backend's reproducible_rows() (Note [Reproducible
  // rows] in backend/backend.h).
  virtual int64_t choose_offload_rows(int64_t batch, int64_t seq) = 0;
  const SkeletalLayout& layout() const { return layout_; }
  // The backend the layers run on (from bind_layers); null before the first micro-batch.
  Backend* backend() const { return backend_; }
  // The layers (from bind_layers); null before the first micro-batch.
  const LayerRunner* layers() const { return layers_; }

 private:
  void acquire_step_buffers();
  void release_step_buffers();
  void ensure_host_storage();
  void queue_offload(int layer);
  void queue_prefetch(int layer);
  void poison(const SavedActs& s, bool x_too);
  void poison_step_buffers();
  void bind_backend(Backend& backend);

  const SkeletalLayout layout_;
  ActivationAllocator& alloc_;
  SwapOptions options_;
  const int L_;
  int first_ = 0, end_ = 0;  // the micro-batch's layers [first_, end_) (set_layer_range)
  int offload_end_ = 0;      // layers [first_, offload_end_) go to the host: end_ - 2, or end_
  bool parked_ = false;      // between park() and the first backward_ready
  int64_t batch_ = 0, seq_ = 0, offload_rows_ = 0;
  const LayerRunner* layers_ = nullptr;
  Backend* backend_ = nullptr;  // the layers' (layers_->backend()); fixed once bound

  // device, held from begin_step to the end of the micro-batch: see Note [Rounding buffers]
  bool step_live_ = false;
  Tensor x_ring_[3];              // [T, C] each; layer l's input in x_ring_[l % 3]
  SavedActs rounding_[2];         // every field but x; layer l's in rounding_[l % 2]
  std::vector<SavedActs> slots_;  // layer l: x_ring_[l % 3] + rounding_[l % 2]
  std::vector<int> forward_calls_;
  std::vector<bool> offloaded_;

  // host: one block per offloaded layer (0 .. L-3), laid out by host_offset_ (bytes), in the
  // backend's pinned host memory
  std::optional<MemorySpace> own_host_;
  MemorySpace* host_ = nullptr;  // &*own_host_ or SwapOptions::host_space
  std::vector<SpaceBuffer> host_layers_;
  // batch, seq, rows and first layer of host_layers_ (a block per layer of [first_, offload_end_))
  int64_t host_shape_[4] = {-1, -1, -1, -1};
  int64_t host_offset_[kMaxSkeletalFields] = {};

  std::vector<Event> offload_done_, prefetch_done_;
  std::vector<double> layer_forward_s_;
  std::chrono::steady_clock::time_point layer_start_;
  SwapProfile profile_;
  // Note [A warm profile]: forward passes ended before the profiled one, and the copy stream's
  // totals when the profiled pass began
  int cold_passes_ = 0;
  int64_t d2h_bytes_before_ = 0;
  double d2h_busy_before_ = 0.0;

  // Last: destroyed first, so both streams have finished every copy before any buffer goes.
  // Made by the backend when it is bound.
  std::unique_ptr<Stream> d2h_, h2d_;
};

}  // namespace memo
