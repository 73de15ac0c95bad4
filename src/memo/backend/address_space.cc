#include "memo/backend/address_space.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "memo/core/error.h"

namespace memo {

namespace {
constexpr int64_t kAlign = 64;
constexpr int64_t kChunkBytes = int64_t(1) << 40;  // 1 TiB of address space per reservation
}  // namespace

AddressSpace::~AddressSpace() {
  for (const Chunk& c : chunks_) munmap(c.base, size_t(c.bytes));
}

float* AddressSpace::take(int64_t bytes) {
  MEMO_CHECK(bytes >= 0, "AddressSpace: negative size ", bytes);
  bytes = std::max<int64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  auto it = free_.find(bytes);
  if (it != free_.end()) {
    float* p = it->second;
    free_.erase(it);
    return p;
  }
  if (chunks_.empty() || chunks_.back().bytes - chunks_.back().used < bytes) {
    const int64_t size = std::max(kChunkBytes, bytes);
    void* base =
        mmap(nullptr, size_t(size), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
      throw Error(str("meta backend: cannot reserve another ", gib(double(size)),
                      " of address space after ", gib(double(reserved_)), " (",
                      std::strerror(errno),
                      "): the traced step holds more than a process can "
                      "address; the sequence is far beyond what any GPU here holds, try a shorter "
                      "--seq"));
    chunks_.push_back(Chunk{static_cast<char*>(base), size, 0});
    reserved_ += size;
  }
  Chunk& c = chunks_.back();
  float* p = reinterpret_cast<float*>(c.base + c.used);
  c.used += bytes;
  return p;
}

void AddressSpace::give_back(float* p, int64_t bytes) {
  if (p == nullptr) return;
  bytes = std::max<int64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  free_.emplace(bytes, p);
}

}  // namespace memo
