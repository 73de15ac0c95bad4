// The trace recorder: an ActivationAllocator that hands out real memory (so one real training step
// runs under it; in shape-only mode, address ranges without memory: Note [Meta backend]) and
// records every request (name, bytes, kind, order) and release, giving each a lifetime in
// request-order steps. A decorating strategy marks where each layer's forward and backward pass
// begins and ends, so the trace splits into the two levels of the static plan (see Note [Bi-level
// planning] in plan/problem.h). It only records; activation_plan.h plans.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/backend/caching_allocator.h"
#include "memo/memory/plan/problem.h"
#include "memo/memory/strategy.h"

namespace memo {

enum class Pass { kForward, kBackward };
const char* pass_name(Pass pass);

// Note [Request-order time]
// Time counts requests: request i is made at step i, and a buffer released after request j and
// before request j+1 is dead from step j+1 on, so its lifetime is [i, j+1). Releases between two
// requests all happen "at once"; their order among themselves does not matter to a plan.
struct TracedRequest {
  std::string name;  // as the model names it ("attn.dq"); stable across steps and layers
  int64_t bytes{};   // requested bytes (numel * dtype_bytes), before rounding to kAlignBytes
  ActKind kind{};
  DType dtype{};
  plan::Step begin{};  // its index in the request sequence
  plan::Step end{};    // requests made before its release (see Note [Request-order time])
  int phase = -1;      // index into Trace::phases for a transient made inside a layer pass
};

// One layer's forward or backward pass: the requests [begin, end) made inside it.
struct TracePhase {
  Pass pass{};
  int layer{};
  plan::Step begin{};
  plan::Step end{};
};

struct Trace {
  int64_t batch{}, seq{};
  std::vector<TracedRequest> requests;  // in request order
  std::vector<TracePhase> phases;       // in the order the passes ended
};

// Records while delegating the memory to a CachingAllocator. Not thread-safe (one compute stream).
class TraceRecorder final : public ActivationAllocator {
 public:
  // Requests are served from `raw` (host memory by default; the meta backend's address ranges
  // when tracing with it).
  explicit TraceRecorder(RawAllocator& raw = default_host_allocator()) : memory_(0, raw) {}
  Tensor acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) override;
  void release(const Tensor& t) override;
  int64_t live_bytes() const override { return memory_.live_bytes(); }
  int64_t peak_live_bytes() const override { return memory_.peak_live_bytes(); }
  int64_t reserved_bytes() const override { return memory_.reserved_bytes(); }
  void reset_peak() override { memory_.reset_peak(); }

  // A layer pass starts now (the latest call for a pass and layer wins) or ends now.
  void mark_begin(Pass pass, int layer);
  void mark_end(Pass pass, int layer);
  // The trace so far. Throws Error unless every request was released and every transient made
  // inside a layer pass died inside it.
  Trace finish(int64_t batch, int64_t seq) const;

 private:
  CachingAllocator memory_;
  std::vector<TracedRequest> requests_;
  std::vector<TracePhase> phases_;
  std::unordered_map<const void*, size_t> live_;  // data -> request
  std::unordered_map<int64_t, plan::Step> open_;  // (pass, layer) key -> begin
};

// Forwards every call to `inner` and tells the recorder where each layer pass begins and ends:
// a forward pass starts when forward_slot(l) last returns and ends at forward_done(l) (the model
// asks for slot l+1 before running layer l, see memory/strategy.h); a backward pass runs from
// backward_ready(l)'s return to backward_done(l). Requests the strategy makes inside its hooks
// are therefore outside the layer passes and planned at level 2.
class TracingStrategy final : public ActivationStrategy {
 public:
  TracingStrategy(ActivationStrategy& inner, TraceRecorder& recorder)
      : inner_(inner), recorder_(recorder) {}
  std::string name() const override { return inner_.name(); }
  void begin_step(int64_t batch, int64_t seq) override { inner_.begin_step(batch, seq); }
  void bind_layers(const LayerRunner& layers) override { inner_.bind_layers(layers); }
  int64_t host_peak_bytes() const override { return inner_.host_peak_bytes(); }
  bool wants_warmup() const override { return inner_.wants_warmup(); }
  std::string summary() const override { return inner_.summary(); }
  CopyTime copy_time() const override { return inner_.copy_time(); }
  void set_layer_range(int first, int last, bool parked) override {
    inner_.set_layer_range(first, last, parked);
  }
  void park() override { inner_.park(); }
  const SavedActs& forward_slot(int layer) override;
  void forward_done(int layer) override;
  const SavedActs& backward_ready(int layer) override;
  void backward_done(int layer) override;
  void discard(int layer) override;

 private:
  ActivationStrategy& inner_;
  TraceRecorder& recorder_;
};

// Makes the activation strategy a run uses, over the allocator it is given.
using StrategyFactory =
    std::function<std::unique_ptr<ActivationStrategy>(const SkeletalLayout&, ActivationAllocator&)>;
StrategyFactory keep_strategy_factory();

// Runs `step` (one forward and backward of one micro-batch of `batch` x `seq` tokens, run by the
// caller: memory/ does not know the model) once under a TraceRecorder, with the strategy
// `make_strategy` builds over it, and returns the trace. train/device_plan.h runs the model.
using StepFunction = std::function<void(ActivationStrategy& strategy, ActivationAllocator& alloc)>;
Trace record_step(RawAllocator& memory, const SkeletalLayout& layout, int64_t batch, int64_t seq,
                  const StrategyFactory& make_strategy, const StepFunction& step);

// The requests of `trace` resized for `seq` tokens per sequence: each size is the affine function
// of seq through its sizes in `trace` and `other` (traced at another seq) when both have the same
// requests (names, kinds, lifetimes), else proportional to seq. Lifetimes are kept. An estimate
// for "what would fit" messages; a run always plans from a real trace.
Trace scale_trace(const Trace& trace, const Trace& other, int64_t seq);

}  // namespace memo
