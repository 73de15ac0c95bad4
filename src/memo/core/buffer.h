// An owning, aligned, move-only array of trivially copyable elements: parameters, gradients,
// optimiser state and other long-lived storage. Activations never use it (see
// backend/allocator.h). Contents start zeroed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "memo/core/error.h"
#include "memo/core/tensor.h"

namespace memo {

template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr int64_t kAlign = 64;
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t numel) : numel_(numel) {
    MEMO_CHECK(numel >= 0, "negative buffer length ", numel);
    const int64_t bytes =
        std::max<int64_t>((numel * int64_t(sizeof(T)) + kAlign - 1) / kAlign * kAlign, kAlign);
    data_.reset(static_cast<T*>(std::aligned_alloc(kAlign, size_t(bytes))));
    MEMO_CHECK(data_ != nullptr, "out of memory allocating ", gib(double(bytes)));
    std::memset(static_cast<void*>(data_.get()), 0, size_t(bytes));
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  int64_t numel() const { return numel_; }
  View<T> view() { return View<T>(data(), {numel_}); }  // the whole buffer, flat
  View<const T> view() const { return View<const T>(data(), {numel_}); }
  int64_t bytes() const { return numel_ * int64_t(sizeof(T)); }
  T& operator[](int64_t i) { return data_.get()[i]; }
  const T& operator[](int64_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t numel_ = 0;
};

}  // namespace memo
