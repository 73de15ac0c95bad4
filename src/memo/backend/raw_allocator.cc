#include "memo/backend/raw_allocator.h"

#include <algorithm>
#include <cstdlib>

#include "memo/core/error.h"

namespace memo {
namespace {

int64_t rounded(int64_t bytes) {
  return std::max<int64_t>(kRawAlignBytes,
                           (bytes + kRawAlignBytes - 1) / kRawAlignBytes * kRawAlignBytes);
}

}  // namespace

void* HostAllocator::allocate(int64_t bytes, const char* what) {
  MEMO_CHECK(bytes >= 0, space_name(space_), " memory: request of ", bytes, " bytes for ", what);
  void* p = std::aligned_alloc(size_t(kRawAlignBytes), size_t(rounded(bytes)));
  if (p == nullptr)
    throw BudgetError(str("out of ", space_name(space_), " memory allocating ",
                          gib(double(rounded(bytes))), " for ", what));
  return p;
}

void HostAllocator::deallocate(void* p, int64_t) { std::free(p); }

HostAllocator& default_host_allocator() {
  static HostAllocator host(MemSpace::kHost);
  return host;
}

void* AddressAllocator::allocate(int64_t bytes, const char* what) {
  MEMO_CHECK(bytes >= 0, "meta memory: request of ", bytes, " bytes for ", what);
  return addresses_.take(rounded(bytes));
}

void AddressAllocator::deallocate(void* p, int64_t bytes) {
  addresses_.give_back(static_cast<float*>(p), rounded(bytes));
}

RawAllocator& pick_allocator(MemSpace space, SpaceAllocators allocators, const char* backend) {
  RawAllocator* a = space == MemSpace::kHost         ? allocators.host
                    : space == MemSpace::kPinnedHost ? allocators.pinned
                    : space == MemSpace::kDevice     ? allocators.device
                                                     : nullptr;
  if (!a) throw ConfigError(str("the ", backend, " backend has no ", space_name(space), " memory"));
  return *a;
}

}  // namespace memo
