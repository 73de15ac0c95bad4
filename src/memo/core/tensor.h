// memo's one tensor-view type: a non-owning (pointer, shape, stride) value, up to 4 dimensions.
// Views never own memory; buffers come from an allocator (backend/allocator.h) or an owner such as
// the parameter store. Strides are in elements. A view is printable: "[T=8, C=64]" style via
// shape_str().
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <type_traits>

#include "memo/core/error.h"

namespace memo {

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    MEMO_CHECK(d.size() <= kMaxDims, "shape has ", d.size(), " dims, at most ", kMaxDims);
    for (int64_t v : d) dims[ndim++] = v;
  }
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;
};

inline std::ostream& operator<<(std::ostream& out, const Shape& s) { return out << s.str(); }

template <class T>
class View {
 public:
  View() = default;
  // Contiguous row-major view.
  View(T* data, Shape shape) : data_(data), shape_(shape) {
    int64_t s = 1;
    for (int i = shape.ndim - 1; i >= 0; --i) {
      stride_[i] = s;
      s *= shape.dims[i];
    }
  }
  View(T* data, Shape shape, std::array<int64_t, kMaxDims> stride)
      : data_(data), shape_(shape), stride_(stride) {}
  // A view of T can be read as a view of const T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  View(const View<U>& o) : data_(o.data()), shape_(o.shape()), stride_(o.stride()) {}

  T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  const std::array<int64_t, kMaxDims>& stride() const { return stride_; }
  int ndim() const { return shape_.ndim; }
  int64_t dim(int i) const { return shape_.dims[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t bytes() const { return numel() * int64_t(sizeof(T)); }
  bool empty() const { return data_ == nullptr; }

  // 1-D and 2-D conveniences used by kernels: size(), rows(), cols(), ld() (row stride).
  int64_t size() const { return numel(); }
  int64_t rows() const { return shape_.dims[0]; }
  int64_t cols() const { return shape_.ndim >= 2 ? shape_.dims[1] : 1; }
  int64_t ld() const { return stride_[0]; }

  T& operator[](int64_t i) const { return data_[i * stride_[shape_.ndim - 1]]; }
  T& operator()(int64_t i, int64_t j) const { return data_[i * stride_[0] + j * stride_[1]]; }
  T& operator()(int64_t i, int64_t j, int64_t k) const {
    return data_[i * stride_[0] + j * stride_[1] + k * stride_[2]];
  }

  bool contiguous() const {
    int64_t s = 1;
    for (int i = shape_.ndim - 1; i >= 0; --i) {
      if (shape_.dims[i] != 1 && stride_[i] != s) return false;
      s *= shape_.dims[i];
    }
    return true;
  }

  // Rows [begin, end) of dimension 0: for a [T, C] activation, a token range, one contiguous
  // byte range (see DESIGN.md section 2, token-wise split).
  View slice_rows(int64_t begin, int64_t end) const {
    MEMO_CHECK(0 <= begin && begin <= end && end <= rows(), "slice_rows [", begin, ", ", end,
               ") of ", shape_.str());
    Shape s = shape_;
    s.dims[0] = end - begin;
    return View(data_ + begin * stride_[0], s, stride_);
  }
  // Columns [begin, end) of a 2-D view (strided: ld() stays the parent's).
  View slice_cols(int64_t begin, int64_t end) const {
    MEMO_CHECK(ndim() == 2 && 0 <= begin && begin <= end && end <= cols(), "slice_cols [", begin,
               ", ", end, ") of ", shape_.str());
    Shape s = shape_;
    s.dims[1] = end - begin;
    return View(data_ + begin * stride_[1], s, stride_);
  }
  // Same memory, new contiguous shape with the same element count.
  View reshape(Shape s) const {
    MEMO_CHECK(contiguous() && s.numel() == numel(), "reshape ", shape_.str(), " to ", s.str());
    return View(data_, s);
  }

 private:
  T* data_ = nullptr;
  Shape shape_{};
  std::array<int64_t, kMaxDims> stride_{};
};

using Tensor = View<float>;
using ConstTensor = View<const float>;

template <class A, class B>
bool same_shape(const View<A>& a, const View<B>& b) {
  return a.shape() == b.shape();
}

}  // namespace memo
