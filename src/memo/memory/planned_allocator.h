// The planned arena: one block of the plan's peak, allocated once; each request gets its planned
// offset. It executes an ActivationPlan (activation_plan.h) and nothing else: the request sequence
// must be the traced one, repeated once per micro-batch (see Note [Checked plan execution]).
// Releases free nothing; they only tell the allocator a buffer is dead.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <unordered_map>
#include <utility>

#include "memo/backend/allocator.h"
#include "memo/backend/raw_allocator.h"
#include "memo/memory/activation_plan.h"

namespace memo {

// Note [Checked plan execution]
// A plan is only safe for the request sequence it was made from: the same requests (name, bytes,
// kind) in the same order, each released no later than traced. Request i of a step must match
// traced request i, or acquire throws TraceMismatchError naming i, what was expected and what
// came; a buffer still live when a request the plan places over it arrives (traced end passed)
// throws too. So a changed sequence (another --seq, another code path) stops the run instead of
// corrupting memory. After the last request of a step and with nothing live, the next acquire
// starts the next step at request 0.
class TraceMismatchError : public Error {
  using Error::Error;
};

class PlannedAllocator final : public ActivationAllocator {
 public:
  // The arena comes from `raw` (the backend's device memory; host memory by default).
  explicit PlannedAllocator(ActivationPlan plan, RawAllocator& raw = default_host_allocator());
  PlannedAllocator(const PlannedAllocator&) = delete;
  PlannedAllocator& operator=(const PlannedAllocator&) = delete;

  Tensor acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) override;
  void release(const Tensor& t) override;
  int64_t live_bytes() const override { return live_bytes_; }  // aligned, as planned
  int64_t peak_live_bytes() const override { return peak_live_bytes_; }
  int64_t reserved_bytes() const override { return plan_.arena_bytes; }  // the whole arena
  void reset_peak() override {
    peak_live_bytes_ = live_bytes_;
    peak_top_bytes_ = top_bytes();
  }

  // The highest arena byte in use since reset_peak(): reaches the plan's peak, never passes it.
  int64_t peak_top_bytes() const { return peak_top_bytes_; }
  const ActivationPlan& plan() const { return plan_; }

  // A test hook, called at the start of every acquire with the request's index in the step.
  // Tests use it to make a request the trace does not have; never set in a run.
  std::function<void(int64_t request)> on_acquire;

 private:
  int64_t top_bytes() const;

  ActivationPlan plan_;
  RawBuffer arena_;  // [arena_bytes], the backend's device space
  int64_t next_ = 0;
  int64_t live_bytes_ = 0, peak_live_bytes_ = 0, peak_top_bytes_ = 0;
  // data -> request index; a multimap because a zero-byte buffer may share its address
  std::unordered_multimap<const void*, size_t> live_;
  std::set<std::pair<plan::Step, size_t>> live_by_end_;  // (traced end, request index)
};

}  // namespace memo
