// The CUDA backend's view of a tensor (backend_impl.cuh): its device address, checked for the
// memory space and dtype the kernels take, and the matrix shapes the bodies of cuda/bodies.h read.
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

// Note [Device tensors]
// Every tensor a kernel of this backend receives holds f32 (its compute type; the matrix
// products alone also take bf16: dev_operand, Backend::bf16_products) in memory the GPU reads:
// device memory, or pinned host memory (mapped). A host or meta tensor, or another dtype, is a
// caller's bug, refused here with its shape rather than faulting on the GPU.
void check_device_space(MemSpace space, const Shape& shape) {
  MEMO_CHECK(space == MemSpace::kDevice || space == MemSpace::kPinnedHost, "cuda: a tensor ", shape,
             " in ", space_name(space), " memory: kernels read device or pinned host memory");
}
void check_device_tensor(DType dtype, MemSpace space, const Shape& shape) {
  MEMO_CHECK(dtype == DType::kF32, "cuda: a ", dtype_name(dtype), " tensor ", shape,
             ": this backend's kernels take f32 tensors only");
  check_device_space(space, shape);
}

}  // namespace

float* dev(Tensor t) {
  if (t.empty()) return nullptr;
  check_device_tensor(t.dtype(), t.space(), t.shape());
  return static_cast<float*>(t.data());
}
const float* dev(ConstTensor t) {
  if (t.empty()) return nullptr;
  check_device_tensor(t.dtype(), t.space(), t.shape());
  return static_cast<const float*>(t.data());
}

// A matrix product's operand or result: f32, or bf16 (the products are this backend's one bf16
// kernel so far: Backend::bf16_products), in memory the GPU reads.
void* dev_operand(ConstTensor t) {
  MEMO_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, "cuda: a ",
             dtype_name(t.dtype()), " tensor ", t.shape(), ": products take f32 or bf16");
  check_device_space(t.space(), t.shape());
  return const_cast<void*>(t.data());
}
cudaDataType_t cuda_type(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

// The address of a tensor of any dtype (convert, copies), its space checked as above.
void* dev_bytes(Tensor t) {
  check_device_space(t.space(), t.shape());
  return t.data();
}
const void* dev_bytes(ConstTensor t) {
  check_device_space(t.space(), t.shape());
  return t.data();
}

Mat mat(Tensor t) {
  if (t.empty()) return {};
  if (t.ndim() == 1) {
    MEMO_CHECK(t.numel() <= 1 || t.stride()[0] == 1, "cuda: a strided vector ", t.shape());
    return {dev(t), 1, t.numel(), t.numel()};
  }
  if (t.ndim() == 2) {
    MEMO_CHECK(t.cols() <= 1 || t.stride()[1] == 1, "cuda: column stride ", t.stride()[1], " of ",
               t.shape());
    return {dev(t), t.rows(), t.cols(), t.ld()};
  }
  MEMO_CHECK(t.contiguous(), "cuda: a non-contiguous ", t.ndim(), "-D view ", t.shape());
  const int64_t cols = t.dim(0) > 0 ? t.numel() / t.dim(0) : 0;
  return {dev(t), t.dim(0), cols, cols};
}
CMat cmat(ConstTensor t) {
  const Mat m =
      mat(Tensor(const_cast<void*>(t.data()), t.shape(), t.stride(), t.dtype(), t.space()));
  return {m.p, m.rows, m.cols, m.ld};
}

// An f32 or bf16 tensor of a layer kernel (Note [bf16 bodies]), shaped as mat() shapes it.
cuda::XMat xmat(ConstTensor t) {
  if (t.empty()) return {};
  void* p = dev_operand(t);
  const bool bf16 = t.dtype() == DType::kBF16;
  if (t.ndim() == 1) {
    MEMO_CHECK(t.numel() <= 1 || t.stride()[0] == 1, "cuda: a strided vector ", t.shape());
    return {p, 1, t.numel(), t.numel(), bf16};
  }
  if (t.ndim() == 2) {
    MEMO_CHECK(t.cols() <= 1 || t.stride()[1] == 1, "cuda: column stride ", t.stride()[1], " of ",
               t.shape());
    return {p, t.rows(), t.cols(), t.ld(), bf16};
  }
  MEMO_CHECK(t.contiguous(), "cuda: a non-contiguous ", t.ndim(), "-D view ", t.shape());
  const int64_t cols = t.dim(0) > 0 ? t.numel() / t.dim(0) : 0;
  return {p, t.dim(0), cols, cols, bf16};
}
cuda::XVec xvec(ConstTensor t) {
  if (t.empty()) return {};
  MEMO_CHECK(t.contiguous(), "cuda: a non-contiguous vector ", t.shape());
  return {dev_operand(t), t.dtype() == DType::kBF16};
}

}  // namespace memo::cuda_impl
