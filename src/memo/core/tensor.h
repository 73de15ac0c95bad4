// memo's tensor views: non-owning (pointer, shape, stride) values, up to 4 dimensions, strides in
// elements. Views never own memory; buffers come from an allocator (backend/allocator.h) or an
// owner such as the parameter store. Two kinds:
//   - View<T>: a typed view of memory the host may touch (kernels of the CPU backend, host-side
//     tools and tests); operator[] reads and writes elements.
//   - Tensor / ConstTensor: what the engine passes around and hands to a Backend. It carries its
//     dtype (core/dtype.h) and its memory space, and has no element access: reading a value that
//     lives on a device is an explicit Backend::copy_to_host. A backend's kernels turn it into a
//     typed view of the dtype they compute in (as<T>(), or the implicit float conversion), which
//     refuses another dtype and meta memory (Note [Typed tensors]).
// Both print their shape "[T=8, C=64]"-style via shape().str().
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <type_traits>

#include "memo/core/dtype.h"
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

// Whether strides (in elements) lay a shape out densely in row-major order (size-1 dimensions
// may have any stride).
inline bool is_contiguous(const Shape& shape, const std::array<int64_t, kMaxDims>& stride) {
  int64_t s = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && stride[i] != s) return false;
    s *= shape.dims[i];
  }
  return true;
}

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

  bool contiguous() const { return is_contiguous(shape_, stride_); }

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

// Note [Typed tensors]
// A Tensor is a View with its element type erased into a DType and its memory space named. The
// engine's layers, strategies and optimisers hold only Tensors; what a dtype means is the
// backend's business (the CPU computes in f32; CUDA in f32 or bf16). Conversions:
//   - View<T> -> Tensor: implicit for host memory (tests, host-side tools); with a space named,
//     Tensor(view, space), for memory an allocator of that space handed out.
//   - Tensor -> View<T>: as<T>(), which checks the dtype and refuses meta memory (address ranges
//     with nothing behind them). The float conversion is implicit so a backend's f32 kernels take
//     Tensors as they are; only a backend converts: engine code never reads elements.
// Slicing and reshaping keep dtype and space; byte offsets come from dtype_bytes.
template <bool kConst>
class BasicTensor {
 public:
  using Pointer = std::conditional_t<kConst, const void*, void*>;
  using Byte = std::conditional_t<kConst, const char, char>;
  using Stride = std::array<int64_t, kMaxDims>;

  BasicTensor() = default;
  BasicTensor(Pointer data, Shape shape, DType dtype, MemSpace space)
      : data_(data), shape_(shape), dtype_(dtype), space_(space) {
    int64_t s = 1;
    for (int i = shape.ndim - 1; i >= 0; --i) {
      stride_[i] = s;
      s *= shape.dims[i];
    }
  }
  BasicTensor(Pointer data, Shape shape, Stride stride, DType dtype, MemSpace space)
      : data_(data), shape_(shape), stride_(stride), dtype_(dtype), space_(space) {}
  // A typed view of memory in `space`.
  template <class T, class = std::enable_if_t<kConst || !std::is_const_v<T>>>
  BasicTensor(const View<T>& v, MemSpace space)
      : BasicTensor(v.data(), v.shape(), v.stride(), DTypeOf<std::remove_const_t<T>>::value,
                    space) {}
  // A typed view of host memory.
  template <class T, class = std::enable_if_t<kConst || !std::is_const_v<T>>>
  BasicTensor(const View<T>& v)  // NOLINT(google-explicit-constructor): host views pass as they are
      : BasicTensor(v, MemSpace::kHost) {}
  // A Tensor can be read as a ConstTensor.
  template <bool kOther, class = std::enable_if_t<kConst && !kOther>>
  BasicTensor(const BasicTensor<kOther>& o)  // NOLINT(google-explicit-constructor)
      : BasicTensor(o.data(), o.shape(), o.stride(), o.dtype(), o.space()) {}

  Pointer data() const { return data_; }
  DType dtype() const { return dtype_; }
  MemSpace space() const { return space_; }
  const Shape& shape() const { return shape_; }
  const Stride& stride() const { return stride_; }
  int ndim() const { return shape_.ndim; }
  int64_t dim(int i) const { return shape_.dims[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t element_bytes() const { return dtype_bytes(dtype_); }
  int64_t bytes() const { return numel() * element_bytes(); }
  bool empty() const { return data_ == nullptr; }
  int64_t size() const { return numel(); }
  int64_t rows() const { return shape_.dims[0]; }
  int64_t cols() const { return shape_.ndim >= 2 ? shape_.dims[1] : 1; }
  int64_t ld() const { return stride_[0]; }
  bool contiguous() const { return is_contiguous(shape_, stride_); }

  // The typed view the backend computes on: the dtype must be T's, the memory not meta.
  template <class T>
  View<T> as() const {
    static_assert(!kConst || std::is_const_v<T>, "a ConstTensor reads as View<const T>");
    check_readable(DTypeOf<std::remove_const_t<T>>::value);
    return View<T>(static_cast<T*>(data_), shape_, stride_);
  }
  template <bool C = kConst, class = std::enable_if_t<!C>>
  operator View<float>() const {  // NOLINT(google-explicit-constructor): see Note [Typed tensors]
    return as<float>();
  }
  operator View<const float>() const {  // NOLINT(google-explicit-constructor)
    return as<const float>();
  }

  // Rows [begin, end) of dimension 0 (for a [T, C] activation, a token range).
  BasicTensor slice_rows(int64_t begin, int64_t end) const {
    MEMO_CHECK(0 <= begin && begin <= end && end <= rows(), "slice_rows [", begin, ", ", end,
               ") of ", shape_.str());
    Shape s = shape_;
    s.dims[0] = end - begin;
    return BasicTensor(offset(begin * stride_[0]), s, stride_, dtype_, space_);
  }
  // Columns [begin, end) of a 2-D tensor (strided: ld() stays the parent's).
  BasicTensor slice_cols(int64_t begin, int64_t end) const {
    MEMO_CHECK(ndim() == 2 && 0 <= begin && begin <= end && end <= cols(), "slice_cols [", begin,
               ", ", end, ") of ", shape_.str());
    Shape s = shape_;
    s.dims[1] = end - begin;
    return BasicTensor(offset(begin * stride_[1]), s, stride_, dtype_, space_);
  }
  // Same memory, new contiguous shape with the same element count.
  BasicTensor reshape(Shape s) const {
    MEMO_CHECK(contiguous() && s.numel() == numel(), "reshape ", shape_.str(), " to ", s.str());
    return BasicTensor(data_, s, dtype_, space_);
  }
  // The contiguous `shape` that starts `first` elements into this contiguous tensor (a part of a
  // flat buffer: statistics packed side by side, one tensor of an optimiser's state).
  BasicTensor part(int64_t first, Shape shape) const {
    MEMO_CHECK(contiguous() && first >= 0 && first + shape.numel() <= numel(), "part of ",
               shape.str(), " at ", first, " of ", shape_.str());
    return BasicTensor(offset(first), shape, dtype_, space_);
  }

 private:
  Pointer offset(int64_t elements) const {
    return data_ ? static_cast<Pointer>(static_cast<Byte*>(data_) + elements * element_bytes())
                 : data_;
  }
  void check_readable(DType want) const {
    MEMO_CHECK(dtype_ == want, "a ", dtype_name(dtype_), " tensor ", shape_.str(), " read as ",
               dtype_name(want));
    MEMO_CHECK(space_ != MemSpace::kMeta || data_ == nullptr, "a meta tensor ", shape_.str(),
               " has no values to read");
  }

  Pointer data_ = nullptr;
  Shape shape_{};
  Stride stride_{};
  DType dtype_ = DType::kF32;
  MemSpace space_ = MemSpace::kHost;
};

using Tensor = BasicTensor<false>;
using ConstTensor = BasicTensor<true>;

template <class A, class B>
bool same_shape(const A& a, const B& b) {
  return a.shape() == b.shape();
}

}  // namespace memo
