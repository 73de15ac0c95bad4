// The CUDA backend's tensor operations (backend_impl.cuh; math: cpu/tensor_ops.h): copy, convert,
// fill, scale, add_into, and the reductions, whose chunk sums the host adds in chunk order
// (deterministic); the noise-scale probe's fused pass.
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {

void CudaBackend::do_copy(Tensor dst, ConstTensor src) {
  const Timed timed(this, "copy");
  MEMO_CHECK(dst.dtype() == src.dtype(), "copy: ", dtype_name(src.dtype()), " to ",
             dtype_name(dst.dtype()), " is a convert");
  if (dst.numel() == 0) return;
  if (dst.contiguous() && src.contiguous()) {  // any two shapes of one element count
    check_cuda(cudaMemcpyAsync(dev_operand(dst), dev_operand(src), size_t(dst.bytes()),
                               cudaMemcpyDefault, s()),
               "copy");
    return;
  }
  MEMO_CHECK(same_shape(dst, src), "copy: strided views of different shapes ", dst.shape(), " and ",
             src.shape());
  const cuda::XMat D = xmat(dst), S = xmat(src);  // the bits: a row copy of the element size
  const size_t e = size_t(dtype_bytes(dst.dtype()));
  check_cuda(cudaMemcpy2DAsync(D.p, size_t(D.ld) * e, S.p, size_t(S.ld) * e, size_t(D.cols) * e,
                               size_t(D.rows), cudaMemcpyDefault, s()),
             "copy");
}
void CudaBackend::do_convert(Tensor dst, ConstTensor src) {
  const Timed timed(this, "convert");
  const int64_t n = dst.numel();
  if (n == 0) return;
  void* d = dev_bytes(dst);
  const void* x = dev_bytes(src);
  const bool to_bf16 = dst.dtype() == DType::kBF16, from_bf16 = src.dtype() == DType::kBF16;
  if (to_bf16 == from_bf16) {  // a dtype to itself
    check_cuda(cudaMemcpyAsync(d, x, size_t(dst.bytes()), cudaMemcpyDefault, s()), "convert");
  } else if (to_bf16) {
    launch_convert_to_bf16(static_cast<uint16_t*>(d), static_cast<const float*>(x), n);
  } else {
    launch_convert_from_bf16(static_cast<float*>(d), static_cast<const uint16_t*>(x), n);
  }
}
void CudaBackend::launch_convert_to_bf16(uint16_t* d, const float* x, int64_t n) {
  launch(n, [=] __device__(int64_t i) { d[i] = cuda::to_bf16_bits(x[i]); });
}
void CudaBackend::launch_convert_from_bf16(float* d, const uint16_t* x, int64_t n) {
  launch(n, [=] __device__(int64_t i) { d[i] = cuda::from_bf16_bits(x[i]); });
}
void CudaBackend::do_fill(Tensor dst, float value) {
  const Timed timed(this, "fill");
  const cuda::XMat D = xmat(dst);
  launch_rc(D.rows, D.cols, [=] __device__(int64_t t, int64_t c) { D.at(t, c) = value; });
}
void CudaBackend::do_scale(Tensor x, float factor) {
  const Timed timed(this, "scale");
  const cuda::XMat X = xmat(x);
  launch_rc(X.rows, X.cols,
            [=] __device__(int64_t t, int64_t c) { X.at(t, c) = float(X.at(t, c)) * factor; });
}
void CudaBackend::do_add_into(Tensor dst, ConstTensor src) {
  const Timed timed(this, "add_into");
  if (dst.numel() == 0) return;
  if (dst.contiguous() && src.contiguous()) {  // any two shapes of one element count
    const int64_t n = dst.numel();
    const cuda::XMat D{dev_operand(dst), 1, n, n, dst.dtype() == DType::kBF16},
        S{dev_operand(src), 1, n, n, src.dtype() == DType::kBF16};
    launch(n, [=] __device__(int64_t i) { D.at(0, i) += S.at(0, i); });
    return;
  }
  MEMO_CHECK(same_shape(dst, src), "add_into: strided views of different shapes ", dst.shape(),
             " and ", src.shape());
  const cuda::XMat D = xmat(dst), S = xmat(src);
  launch_rc(D.rows, D.cols, [=] __device__(int64_t t, int64_t c) { D.at(t, c) += S.at(t, c); });
}
double CudaBackend::do_sum(ConstTensor x) {
  const Timed timed(this, "sum");
  return ordered_sum(cmat(x), false);
}
double CudaBackend::do_sum_squares(ConstTensor x) {
  const Timed timed(this, "sum_squares");
  return ordered_sum(cmat(x), true);
}

double CudaBackend::do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                                        View<double> partial) {
  const Timed timed(this, "noise_probe_pass");
  const int64_t n = g.numel(), chunks = noise_probe_partial_numel(n);
  MEMO_CHECK(partial.numel() >= chunks, "noise_probe_pass: ", partial.numel(), " partial sums for ",
             chunks, " chunks");
  double* sums = device_doubles(chunks);
  float *gp = dev(g), *sp = dev(sum);
  const int p = pass == NoiseProbePass::kFirst ? 0 : pass == NoiseProbePass::kMiddle ? 1 : 2;
  launch(chunks, [=] __device__(int64_t k) { sums[k] = cuda::noise_probe_chunk(gp, sp, p, n, k); });
  return host_ordered_sum(sums, chunks);  // `partial` goes unused: the sums stay in `sums`
}

double CudaBackend::ordered_sum(CMat x, bool squares) {
  const int64_t n = x.rows * x.cols, chunks = (n + cuda::kSumChunk - 1) / cuda::kSumChunk;
  if (chunks == 0) return 0.0;
  double* dev = device_doubles(chunks);
  launch(chunks, [=] __device__(int64_t k) { dev[k] = cuda::chunk_sum(x, squares, k); });
  return host_ordered_sum(dev, chunks);
}

}  // namespace memo::cuda_impl
