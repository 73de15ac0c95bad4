// The CUDA backend's decode attention (backend_impl.cuh; math: cpu/attention_decode.cc): new rows
// over a key/value cache, a thread a (row, head) with an online softmax.
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

// The bound on head_dim the decode kernel is instantiated for (its per-thread arrays).
int max_head_dim(int64_t D, const char* op) {
  if (D <= 64) return 64;
  if (D <= 128) return 128;
  if (D <= 256) return 256;
  throw ConfigError(str(op, ": head_dim ", D, " is over the CUDA kernels' 256"));
}

}  // namespace

template <int kMaxD>
void CudaBackend::attention_decode_launch(Mat O, CMat Q, CMat K, CMat V, int64_t first, int64_t G,
                                          int64_t D, int64_t H) {
  launch(Q.rows * H, [=] __device__(int64_t i) {
    cuda::attention_decode_item<kMaxD>(O, Q, K, V, first, G, D, i / H, i % H);
  });
}

void CudaBackend::do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                                      int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                      Tensor scratch) {
  const Timed timed(this, "attention_decode");
  const int64_t D = q.cols() / n_heads, G = n_heads / n_kv_heads, H = n_heads;
  const Mat O = mat(o);
  const CMat Q = cmat(q), K = cmat(k), V = cmat(v);
  switch (max_head_dim(D, "attention_decode")) {
    case 64:
      return attention_decode_launch<64>(O, Q, K, V, first, G, D, H);
    case 128:
      return attention_decode_launch<128>(O, Q, K, V, first, G, D, H);
    default:
      return attention_decode_launch<256>(O, Q, K, V, first, G, D, H);
  }
}

}  // namespace memo::cuda_impl
