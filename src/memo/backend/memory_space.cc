#include "memo/backend/memory_space.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "memo/core/error.h"

namespace memo {

namespace {
constexpr int64_t kSpaceAlignBytes = 64;
}

SpaceBuffer::SpaceBuffer(SpaceBuffer&& o) noexcept
    : block_(std::move(o.block_)),
      bytes_(std::exchange(o.bytes_, 0)),
      space_(std::exchange(o.space_, nullptr)) {}

SpaceBuffer& SpaceBuffer::operator=(SpaceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    block_ = std::move(o.block_);
    bytes_ = std::exchange(o.bytes_, 0);
    space_ = std::exchange(o.space_, nullptr);
  }
  return *this;
}

void SpaceBuffer::reset() {
  if (space_) space_->live_bytes_ -= bytes_;
  block_.reset();
  bytes_ = 0;
  space_ = nullptr;
}

MemorySpace::MemorySpace(std::string name, int64_t budget_bytes, RawAllocator& raw)
    : name_(std::move(name)), budget_bytes_(budget_bytes), raw_(&raw) {
  MEMO_CHECK(budget_bytes >= 0, name_, " memory budget ", budget_bytes, " bytes must be >= 0");
}

SpaceBuffer MemorySpace::allocate(std::string_view what, int64_t bytes) {
  MEMO_CHECK(bytes >= 0, name_, " memory: request of ", bytes, " bytes for ", what);
  const int64_t rounded = std::max<int64_t>(
      kSpaceAlignBytes, (bytes + kSpaceAlignBytes - 1) / kSpaceAlignBytes * kSpaceAlignBytes);
  if (budget_bytes_ > 0 && live_bytes_ + rounded > budget_bytes_)
    throw BudgetError(str(name_, " memory: ", what, " needs ", gib(double(rounded)), " but ",
                          gib(double(live_bytes_)), " of the ", gib(double(budget_bytes_)),
                          " budget are in use (short ",
                          gib(double(live_bytes_ + rounded - budget_bytes_)), ")"));
  SpaceBuffer b;
  b.block_ = RawBuffer(*raw_, rounded, std::string(what).c_str());
  b.bytes_ = rounded;
  b.space_ = this;
  live_bytes_ += rounded;
  if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
  return b;
}

}  // namespace memo
