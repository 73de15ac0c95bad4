// The one interface through which every activation buffer of the engine is requested.
// Layers, the model and the trainer never allocate activations any other way, so a planner can
// trace every request (name, size, order, lifetime) and later place it at a planned offset.
// Not here: parameters, gradients and optimiser state (owned by model/params.h and optim/).
#pragma once

#include <cstdint>
#include <string_view>

#include "memo/core/dtype.h"
#include "memo/core/tensor.h"

namespace memo {

// Skeletal (saved for the backward) or transient (freed within one layer's forward or
// backward). See DESIGN.md section 2; the memory manager moves only skeletal tensors.
enum class ActKind { kTransient, kSaved };

inline constexpr int64_t kAlignBytes = 64;  // one cache line / one AVX-512 vector

class ActivationAllocator {
 public:
  virtual ~ActivationAllocator() = default;
  // A buffer of `shape` elements of `dtype` (numel * dtype_bytes(dtype) bytes), contents
  // undefined, aligned to kAlignBytes. Throws BudgetError when a budget is exceeded. `name` is
  // stable across steps and layers ("attn.q", "mlp.gate"). The tensor carries `dtype` and the
  // memory space of the allocator's raw memory (the backend's device space).
  virtual Tensor acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) = 0;
  // Gives back a buffer obtained from acquire; the view must be the one acquire returned.
  virtual void release(const Tensor& t) = 0;

  virtual int64_t live_bytes() const = 0;       // bytes handed out now
  virtual int64_t peak_live_bytes() const = 0;  // most bytes handed out at once
  virtual int64_t reserved_bytes() const = 0;   // bytes this allocator holds from the system
  virtual void reset_peak() = 0;
};

// RAII pairing of acquire/release for transients whose lifetime is one scope.
class ScopedAct {
 public:
  ScopedAct(ActivationAllocator& alloc, std::string_view name, Shape shape, DType dtype)
      : alloc_(&alloc), t_(alloc.acquire(name, shape, ActKind::kTransient, dtype)) {}
  ~ScopedAct() { alloc_->release(t_); }
  ScopedAct(const ScopedAct&) = delete;
  ScopedAct& operator=(const ScopedAct&) = delete;
  const Tensor& operator*() const { return t_; }
  const Tensor* operator->() const { return &t_; }
  const Tensor& get() const { return t_; }

 private:
  ActivationAllocator* alloc_;
  Tensor t_;
};

}  // namespace memo
