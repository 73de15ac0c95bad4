// An owning array of T in a backend's device space: optimiser state, the noise-scale probe's side
// buffer and the scratch their kernels use, which live wherever the backend's kernels run. Float
// arrays start zeroed through the backend (device memory is not written from the host); other
// element types are scratch and start undefined. Reading or writing the values from the host goes
// through the backend's copies unless host_can_access(space()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "memo/backend/backend.h"
#include "memo/backend/raw_allocator.h"

namespace memo {

template <class T>
class SpaceArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SpaceArray() = default;
  SpaceArray(Backend& backend, int64_t numel, const char* what = "a state buffer")
      : buffer_(backend.allocator(backend.device_space()),
                std::max<int64_t>(numel, 1) * int64_t(sizeof(T)), what),
        numel_(numel) {
    if constexpr (std::is_same_v<T, float>)
      if (numel > 0) backend.fill(tensor({numel}), 0.0f);
  }
  // The contiguous `shape` that starts `first` elements in, as a Tensor of this space.
  Tensor tensor(Shape shape, int64_t first = 0) const {
    MEMO_CHECK(first >= 0 && first + shape.numel() <= std::max<int64_t>(numel_, 1), "part of ",
               shape.str(), " at ", first, " of an array of ", numel_);
    return Tensor(View<T>(data() + first, shape), space());
  }
  T* data() const { return buffer_.as<T>(); }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * int64_t(sizeof(T)); }
  MemSpace space() const { return buffer_.space(); }
  bool empty() const { return numel_ == 0; }

 private:
  RawBuffer buffer_;
  int64_t numel_ = 0;
};

}  // namespace memo
