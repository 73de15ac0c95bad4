// Entry checks shared by the CPU kernels of every backend (not part of the kernel API). A "matrix"
// is a 2-D view whose rows are contiguous (column stride 1, any row stride ld() >= cols); a
// "vector" is any contiguous view, so [T] and [B, S] both serve as a length-T vector.
#pragma once

#include <cstdint>

#include "memo/core/tensor.h"

namespace memo {

template <class V>  // a View<T> or a Tensor
bool is_matrix(const V& v) {
  return v.ndim() == 2 && (v.cols() <= 1 || v.stride()[1] == 1) &&
         (v.rows() <= 1 || v.ld() >= v.cols());
}

template <class V>
bool is_matrix(const V& v, int64_t rows, int64_t cols) {
  return is_matrix(v) && v.rows() == rows && v.cols() == cols;
}

template <class V>
bool is_vector(const V& v, int64_t numel) {
  return v.contiguous() && v.numel() == numel;
}

// Work below this many elements runs on one thread: forking costs more than it saves. Row-wise
// kernels give the same bits either way (rows are independent).
inline constexpr int64_t kParallelMinNumel = 1 << 14;

}  // namespace memo
