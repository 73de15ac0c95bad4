// A budgeted pool over one RawAllocator: the pinned host pool that offloaded activations go to
// (and, with the same interface, any other space a backend offers). Buffers are move-only and give
// their bytes back when destroyed; the space measures live and peak bytes and refuses a request
// past its budget with a BudgetError that names the space, the request and what is in use. Not
// thread-safe: buffers are allocated and freed on the compute thread only (copy streams read and
// write their contents, never their ownership).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "memo/backend/raw_allocator.h"

namespace memo {

class MemorySpace;

class SpaceBuffer {
 public:
  SpaceBuffer() = default;
  SpaceBuffer(SpaceBuffer&& o) noexcept;
  SpaceBuffer& operator=(SpaceBuffer&& o) noexcept;
  SpaceBuffer(const SpaceBuffer&) = delete;
  SpaceBuffer& operator=(const SpaceBuffer&) = delete;
  ~SpaceBuffer() { reset(); }

  float* data() const { return static_cast<float*>(block_.data()); }
  int64_t bytes() const { return bytes_; }
  bool empty() const { return block_.data() == nullptr; }
  void reset();  // gives the bytes back to the space now

 private:
  friend class MemorySpace;
  RawBuffer block_;
  int64_t bytes_ = 0;  // as counted against the budget
  MemorySpace* space_ = nullptr;
};

class MemorySpace {
 public:
  // budget_bytes: most bytes live at once (0: unlimited). The bytes come from `raw`, which must
  // outlive the space.
  MemorySpace(std::string name, int64_t budget_bytes, RawAllocator& raw);
  MemorySpace(const MemorySpace&) = delete;
  MemorySpace& operator=(const MemorySpace&) = delete;

  // A buffer of `bytes` (rounded up to 64), aligned to 64 bytes, contents undefined. `what` names
  // the request in the error ("layer 3 offload"). Over a meta allocator, an address range with
  // no memory behind it, counted and budgeted the same way.
  SpaceBuffer allocate(std::string_view what, int64_t bytes);

  const std::string& name() const { return name_; }
  MemSpace space() const { return raw_->space(); }
  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = live_bytes_; }

 private:
  friend class SpaceBuffer;
  std::string name_;
  int64_t budget_bytes_;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  RawAllocator* raw_;
};

}  // namespace memo
