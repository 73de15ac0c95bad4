// Shape-only mode: the real model code runs with shapes and sizes, but no data and no arithmetic.
// See Note [Shape-only mode].
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace memo {

// Note [Shape-only mode]
// Planning a 7B layer at a million tokens means tracing requests of tens of GiB each, on a laptop.
// Under a ShapeOnlyScope (thread-local, nests) every kernel checks its arguments' shapes as usual
// and then returns without reading or writing a byte; copy streams queue no copies; buffers come
// from an AddressSpace: address ranges reserved with no access rights and no memory behind them.
// So the layer, model and strategy code run unchanged, the trace recorder sees the same requests,
// sizes, order and lifetimes as in a real step, and a kernel that forgot its guard faults at its
// first load instead of silently reading garbage. Values that a real run would compute (losses,
// norms) are meaningless here; only the shapes are.
namespace detail {
inline thread_local int shape_only_depth = 0;
}

inline bool shapes_only() { return detail::shape_only_depth > 0; }

class ShapeOnlyScope {
 public:
  ShapeOnlyScope() { ++detail::shape_only_depth; }
  ~ShapeOnlyScope() { --detail::shape_only_depth; }
  ShapeOnlyScope(const ShapeOnlyScope&) = delete;
  ShapeOnlyScope& operator=(const ShapeOnlyScope&) = delete;
};

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
