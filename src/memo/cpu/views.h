// The CPU kernels compute on typed host views: inside memo::cpu, Tensor and ConstTensor name
// View<float> and View<const float>, and the CpuBackend hands them its dtype-erased Tensors through
// the checked float conversion (Note [Typed tensors] in core/tensor.h).
#pragma once

#include "memo/core/tensor.h"

namespace memo::cpu {

using Tensor = View<float>;
using ConstTensor = View<const float>;

}  // namespace memo::cpu
