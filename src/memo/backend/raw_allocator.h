// Raw memory of one memory space, the bottom of every allocation memo makes: parameters,
// gradients, optimiser state, activation arenas and host pools all take their bytes from a
// RawAllocator, so a backend decides what "device" and "pinned host" mean (aligned_alloc on the
// CPU, address ranges for the meta backend, cudaMalloc / cudaHostAlloc for CUDA).
#pragma once

#include <cstdint>
#include <utility>

#include "memo/backend/address_space.h"
#include "memo/core/dtype.h"
#include "memo/core/error.h"
#include "memo/core/tensor.h"

namespace memo {

inline constexpr int64_t kRawAlignBytes = 256;  // what cuBLASLt and cp.async want; 4 cache lines

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual MemSpace space() const = 0;
  // `bytes` (> 0 after rounding up to kRawAlignBytes), aligned to kRawAlignBytes, contents
  // undefined. Throws memo::Error naming `what` and the size when the space is exhausted.
  virtual void* allocate(int64_t bytes, const char* what) = 0;
  // Gives back a block from allocate with the same `bytes`.
  virtual void deallocate(void* p, int64_t bytes) = 0;
};

// Host memory from aligned_alloc (the CPU backend's host, pinned host and device spaces).
class HostAllocator final : public RawAllocator {
 public:
  explicit HostAllocator(MemSpace space) : space_(space) {}
  MemSpace space() const override { return space_; }
  void* allocate(int64_t bytes, const char* what) override;
  void deallocate(void* p, int64_t bytes) override;

 private:
  MemSpace space_;
};

// The process's host memory, for allocators that default to it (tests, CPU-only tools).
HostAllocator& default_host_allocator();

// Address ranges with no memory behind them (the meta backend): touching one faults.
class AddressAllocator final : public RawAllocator {
 public:
  MemSpace space() const override { return MemSpace::kMeta; }
  void* allocate(int64_t bytes, const char* what) override;
  void deallocate(void* p, int64_t bytes) override;
  int64_t reserved_bytes() const { return addresses_.reserved_bytes(); }

 private:
  AddressSpace addresses_;
};

// The allocator of `space` among a backend's host, pinned host and device allocators (each of
// that space); ConfigError naming the backend for a space it lacks (meta, or a null entry).
struct SpaceAllocators {
  RawAllocator* host;
  RawAllocator* pinned;
  RawAllocator* device;
};
RawAllocator& pick_allocator(MemSpace space, SpaceAllocators allocators, const char* backend);

// An owning block of a RawAllocator: move-only, given back on destruction.
class RawBuffer {
 public:
  RawBuffer() = default;
  RawBuffer(RawAllocator& allocator, int64_t bytes, const char* what)
      : allocator_(&allocator), data_(allocator.allocate(bytes, what)), bytes_(bytes) {}
  RawBuffer(RawBuffer&& o) noexcept
      : allocator_(std::exchange(o.allocator_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  RawBuffer& operator=(RawBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = std::exchange(o.allocator_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  RawBuffer(const RawBuffer&) = delete;
  RawBuffer& operator=(const RawBuffer&) = delete;
  ~RawBuffer() { reset(); }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }
  // The block's first shape.numel() elements of `dtype`, as a Tensor of its space.
  Tensor tensor(Shape shape, DType dtype) const {
    MEMO_CHECK(shape.numel() * dtype_bytes(dtype) <= bytes_, "a ", dtype_name(dtype), " tensor ",
               shape.str(), " does not fit a block of ", bytes_, " bytes");
    return Tensor(data_, shape, dtype, space());
  }
  MemSpace space() const { return allocator_ ? allocator_->space() : MemSpace::kHost; }
  void reset() {
    if (data_) allocator_->deallocate(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  RawAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace memo
