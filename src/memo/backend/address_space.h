// Address ranges with no memory behind them: what the meta backend hands out as "memory", so the
// real model and strategy code can run a step of any size with shapes and sizes only (Note [Meta
// backend] in meta/meta_backend.h).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace memo {

// Address ranges without memory: each take() returns a 64-byte-aligned range of `bytes` that no
// other live take() overlaps, inside reservations made with PROT_NONE (touching one faults).
// Ranges are handed back with give_back() and reused by exact size, so a long trace does not
// exhaust the address space. Not thread-safe.
class AddressSpace {
 public:
  AddressSpace() = default;
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  float* take(int64_t bytes);
  void give_back(float* p, int64_t bytes);
  int64_t reserved_bytes() const { return reserved_; }

 private:
  struct Chunk {
    char* base;
    int64_t bytes;
    int64_t used;
  };
  std::vector<Chunk> chunks_;
  std::multimap<int64_t, float*> free_;  // given-back ranges by size
  int64_t reserved_ = 0;
};

}  // namespace memo
