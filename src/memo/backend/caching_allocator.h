// A dynamic best-fit caching allocator, as PyTorch's caching allocator works in spirit: freed
// blocks are kept and handed to later requests that fit; nothing is returned to the system until
// destruction. Because memo's request sequence repeats every step, after the first step it makes
// no system allocation. It serves a run without a --device-memory budget (a budget plans the
// activations into one arena instead), validation, and the fragmentation baseline. Not
// thread-safe: one compute stream.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "memo/backend/allocator.h"
#include "memo/backend/raw_allocator.h"

namespace memo {

class CachingAllocator final : public ActivationAllocator {
 public:
  // budget_bytes: largest reserved_bytes() allowed (0: unlimited). Blocks come from `raw` (host
  // memory by default; the meta backend's address ranges when tracing with it), which must
  // outlive the allocator.
  explicit CachingAllocator(int64_t budget_bytes = 0, RawAllocator& raw = default_host_allocator())
      : budget_bytes_(budget_bytes), raw_(&raw) {}
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Tensor acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) override;
  void release(const Tensor& t) override;

  int64_t live_bytes() const override { return live_bytes_; }
  int64_t peak_live_bytes() const override { return peak_live_bytes_; }
  int64_t reserved_bytes() const override { return reserved_bytes_; }
  void reset_peak() override { peak_live_bytes_ = live_bytes_; }

 private:
  using Block = RawBuffer;

  int64_t budget_bytes_;
  RawAllocator* raw_;
  int64_t live_bytes_ = 0;
  int64_t peak_live_bytes_ = 0;
  int64_t reserved_bytes_ = 0;
  std::multimap<int64_t, Block> free_;  // capacity bytes -> cached block
  std::unordered_map<const void*, std::pair<int64_t, Block>>
      used_;  // data -> (capacity bytes, block)
};

}  // namespace memo
