#include "memo/backend/caching_allocator.h"

#include <algorithm>
#include <string>

namespace memo {

CachingAllocator::~CachingAllocator() = default;

Tensor CachingAllocator::acquire(std::string_view name, Shape shape, ActKind, DType dtype) {
  const int64_t want = shape.numel() * dtype_bytes(dtype);
  const int64_t capacity = (want + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  Block block;
  int64_t got = capacity;
  // Best fit: the smallest cached block that holds the request, if it wastes under half of it.
  auto it = free_.lower_bound(capacity);
  if (it != free_.end() && it->first <= 2 * capacity) {
    got = it->first;
    block = std::move(it->second);
    free_.erase(it);
  } else {
    if (budget_bytes_ > 0 && reserved_bytes_ + capacity > budget_bytes_)
      throw BudgetError(str("activation '", name, "' of ", gib(double(capacity)),
                            " does not fit: ", gib(double(reserved_bytes_)), " reserved, budget ",
                            gib(double(budget_bytes_))));
    block = RawBuffer(*raw_, capacity, std::string(name).c_str());
    reserved_bytes_ += capacity;
  }
  void* data = block.data();
  used_.emplace(data, std::make_pair(got, std::move(block)));
  live_bytes_ += got;
  if (live_bytes_ > peak_live_bytes_) peak_live_bytes_ = live_bytes_;
  return Tensor(data, shape, dtype, raw_->space());
}

void CachingAllocator::release(const Tensor& t) {
  auto it = used_.find(t.data());
  MEMO_CHECK(it != used_.end(), "release of a buffer this allocator did not hand out, shape ",
             t.shape());
  live_bytes_ -= it->second.first;
  free_.emplace(it->second.first, std::move(it->second.second));
  used_.erase(it);
}

}  // namespace memo
