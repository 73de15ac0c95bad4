// The CUDA backend's attention (backend_impl.cuh; math: cpu/kernels.h): the fused bf16 kernels
// (Note [Flash attention] in cuda/flash_attention.h) where they apply, else the chunked schedule
// over cuBLASLt products (Note [Chunked attention] in cuda/chunked_attention.h), in f32 or bf16.
#include <algorithm>
#include <cmath>

#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

// The backward's probabilities and their gradient over one chunk (Note [Chunked attention]): a
// block per score row, its threads over the columns (no per-element divisions).
__global__ void chunk_grad_scores_kernel(cuda::ScoreRows sc, float* dp, uint16_t* ds16,
                                         const float* lse_b, const float* delta, int64_t S) {
  const int64_t h = blockIdx.x / sc.n, r = blockIdx.x % sc.n;
  for (int64_t t = threadIdx.x; t < sc.cols(); t += blockDim.x)
    cuda::grad_scores_item(sc, dp, ds16, lse_b, delta, S, h, r, t);
}

// The softmax of one chunk's score rows (Note [Chunked attention]): a block a row, a thread a
// lane, the lanes' (max, sum) combined in shared memory in the fixed tree of chunked_attention.h.
__global__ void chunk_softmax_kernel(cuda::ScoreRows sc, float* lse_b, int64_t S) {
  __shared__ float m[cuda::kSoftmaxLanes], l[cuda::kSoftmaxLanes];
  const int64_t h = blockIdx.x / sc.n, r = blockIdx.x % sc.n;
  float* s = sc.row(h, r);
  const int64_t visible = sc.visible(r), first = sc.first(r);
  const int lane = int(threadIdx.x);
  float lm, ll;  // in registers: s may alias shared memory as far as the compiler knows
  cuda::softmax_lane(s, first, visible, lane, cuda::kSoftmaxLanes, lm, ll);
  m[lane] = lm;
  l[lane] = ll;
  __syncthreads();
  for (int half = cuda::kSoftmaxLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::softmax_tree_step(m, l, lane, half);
    __syncthreads();
  }
  const float mx = m[0], sum = l[0];
  for (int64_t t = lane; t < sc.cols(); t += cuda::kSoftmaxLanes)
    sc.put_prob(h, r, t, cuda::softmax_prob(s[t], t, first, visible, mx, sum));
  if (lane == 0) lse_b[h * S + sc.i0 + r] = mx + ::logf(sum);
}

// Note [Flash attention]: a thread of a block, with the GPU's barrier, shuffle and product.
struct FlashLane {
  int tid;
  void* smem;
  __device__ void sync() { __syncthreads(); }
  __device__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
  __device__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  // Four 8 x 8 bf16 matrices from shared memory, lane l naming row l % 8 of matrix l / 8.
  __device__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  }
  __device__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  }
};
// Blocks over (tile, head, sequence b0 + z); the causal forward and dQ start with the last query
// tiles, the longest, so the short ones fill the tail.
template <int kD>
__global__ void __launch_bounds__(cuda::kFlashThreads)
    flash_forward_kernel(cuda::FlashArgs f, int64_t tiles, int64_t b0) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  FlashLane th{int(threadIdx.x), flash_smem};
  const int64_t tile = f.causal ? tiles - 1 - blockIdx.x : blockIdx.x;
  cuda::flash_forward_block<kD>(th, f, b0 + blockIdx.z, blockIdx.y, tile * cuda::kFlashRows);
}
template <int kD>
__global__ void __launch_bounds__(cuda::kFlashThreads)
    flash_dq_kernel(cuda::FlashArgs f, int64_t b, int64_t tiles) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  FlashLane th{int(threadIdx.x), flash_smem};
  const int64_t tile = f.causal ? tiles - 1 - blockIdx.x : blockIdx.x;
  cuda::flash_dq_block<kD>(th, f, b, blockIdx.y, tile * cuda::kFlashRows);
}
template <int kD>
__global__ void __launch_bounds__(cuda::kFlashThreads)
    flash_dkdv_kernel(cuda::FlashArgs f, int64_t b) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  FlashLane th{int(threadIdx.x), flash_smem};
  cuda::flash_dkdv_block<kD>(th, f, b, blockIdx.y, int64_t(blockIdx.x) * cuda::kFlashRows);
}

uint16_t* bf16_ptr(ConstTensor t) { return static_cast<uint16_t*>(dev_operand(t)); }
cuda::FlashArgs flash_args(const AttnDims& d, AttnMask mask, ConstTensor q, ConstTensor k,
                           ConstTensor v) {
  cuda::FlashArgs f;
  f.S = d.S, f.H = d.H, f.G = d.G, f.D = d.D, f.causal = mask.causal;
  f.scale = 1.0f / std::sqrt(float(d.D));
  f.q = bf16_ptr(q), f.ldq = q.ld(), f.k = bf16_ptr(k), f.ldk = k.ld();
  f.v = bf16_ptr(v), f.ldv = v.ld();
  return f;
}
// Each kernel's shared memory above the default 48 KiB, asked for once a process (memo drives one
// GPU a process; a failed request is asked again). One flag per kernel, not per signature: the
// forward and dK/dV kernels, and the head dims' instantiations, share one function type, so a
// flag keyed on the type would leave all but the first launched without their limit.
template <auto kKernel>
void flash_smem(int bytes) {
  static const bool done = [&] {
    check_cuda(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "flash attention shared memory");
    return true;
  }();
  (void)done;
}

// The operations of the chunked schedule (Note [Chunked attention]) on the compute stream.
struct ChunkOps {
  CudaBackend* be;
  cuda::ChunkShape c;
  void gemm(const cuda::RowGemm& g) { be->row_gemm(g); }
  void softmax(const cuda::ScoreRows& sc, float* lse_b) {
    if (sc.n == 0) return;
    chunk_softmax_kernel<<<unsigned(c.H * sc.n), cuda::kSoftmaxLanes, 0, be->s()>>>(sc, lse_b, c.S);
    check_cuda(cudaGetLastError(), "chunk softmax launch");
  }
  void zero(cuda::XMat x) { be->zero_launch(Mat{static_cast<float*>(x.p), x.rows, x.cols, x.ld}); }
  void delta(float* delta, cuda::XMat dout, cuda::XMat o, int64_t b) {
    be->chunk_delta_launch(delta, dout, o, c.H, c.S, c.D, b);
  }
  void grad_scores(const cuda::ScoreRows& sc, float* dp, uint16_t* ds16, const float* lse_b,
                   const float* delta) {
    be->grad_scores_launch(sc, dp, ds16, lse_b, delta, c.H, c.S);
  }
  void round_rows(cuda::XMat dst, cuda::XMat src) { be->round_rows_launch(dst, src); }
};
// Row-major strided-batched C = alpha op(A) op(B) + beta C: column-major C^T = op(B)^T op(A)^T,
// as matmul_unchecked.

}  // namespace

void CudaBackend::check_attention_dtypes(const char* op, std::initializer_list<ConstTensor> acts,
                                         std::initializer_list<ConstTensor> f32s) const {
  const DType dt = acts.begin()->dtype();
  for (const ConstTensor& t : acts)
    MEMO_CHECK(t.dtype() == dt && (dt == DType::kF32 || (dt == DType::kBF16 && bf16_attention())),
               op, ": activations of one dtype, f32", bf16_attention() ? " or bf16" : "", "; got ",
               dtype_name(t.dtype()), " ", t.shape(), " beside ", dtype_name(dt));
  for (const ConstTensor& t : f32s)
    MEMO_CHECK(t.dtype() == DType::kF32, op, ": lse and scratch are f32, not ",
               dtype_name(t.dtype()), " ", t.shape());
}

int64_t CudaBackend::attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                     int64_t n_kv_heads) {
  return cuda_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads, chunk_rows_);
}

int64_t CudaBackend::attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                      int64_t n_heads, int64_t n_kv_heads) {
  return cuda_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads, chunk_rows_);
}

int64_t CudaBackend::bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim,
                                                          int64_t n_heads, int64_t n_kv_heads) {
  if (attention_kind_ != AttentionKind::kFlash)
    return attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  return cuda_bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}

int64_t CudaBackend::bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                           int64_t n_heads, int64_t n_kv_heads) {
  if (attention_kind_ != AttentionKind::kFlash)
    return attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  return cuda_bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}

void CudaBackend::do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k,
                                       ConstTensor v, int64_t batch, int64_t n_heads,
                                       int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  const Timed timed(this, "attention_forward");
  const AttnDims d = attention_dims(q, batch, n_heads, n_kv_heads);
  MEMO_CHECK(mask.key_start.empty() || mask.key_start.numel() == d.B * d.S,
             "attention_forward: key_start ", mask.key_start.shape(), " for ", d.B, " x ", d.S,
             " query rows");
  const int32_t* key_start = device_key_start(mask.key_start);
  MEMO_CHECK(lse.contiguous(), "attention_forward: lse ", lse.shape(), " not contiguous");
  check_attention_dtypes("attention_forward", {o, q, k, v}, {lse, scratch});
  if (flash_applies(d, {o, q, k, v})) {
    cuda::FlashArgs f = flash_args(d, mask, q, k, v);
    f.key_start = key_start;
    f.o = bf16_ptr(o), f.ldo = o.ld(), f.lse = dev(lse);
    f.wide = cuda::flash_wide_loads(f);
    return flash_forward_launch(f, d.B);
  }
  cuda::ChunkShape c = cuda::chunk_shape(d.B, d.S, d.H, d.Hkv, d.D, mask.causal, chunk_rows_);
  c.key_start = key_start;
  c.key_start_host = mask.key_start.empty() ? nullptr : mask.key_start.data();
  check_scratch("attention_forward", scratch, cuda::chunked_forward_scratch_numel(c));
  ChunkOps ops{this, c};
  cuda::chunked_attention_forward(ops, c, xmat(o), dev(lse), xmat(q), xmat(k), xmat(v),
                                  dev(scratch));
}

void CudaBackend::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                        ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                        ConstTensor lse, int64_t batch, int64_t n_heads,
                                        int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  const Timed timed(this, "attention_backward");
  const AttnDims d = attention_dims(q, batch, n_heads, n_kv_heads);
  MEMO_CHECK(mask.key_start.empty() || mask.key_start.numel() == d.B * d.S,
             "attention_backward: key_start ", mask.key_start.shape(), " for ", d.B, " x ", d.S,
             " query rows");
  const int32_t* key_start = device_key_start(mask.key_start);
  MEMO_CHECK(lse.contiguous(), "attention_backward: lse ", lse.shape(), " not contiguous");
  check_attention_dtypes("attention_backward", {dq, dk, dv, dout, q, k, v, o}, {lse, scratch});
  if (flash_applies(d, {dq, dk, dv, dout, q, k, v, o})) {
    check_scratch("attention_backward", scratch, d.S * d.H);  // delta of one sequence
    cuda::FlashArgs f = flash_args(d, mask, q, k, v);
    f.key_start = key_start;
    f.o_in = bf16_ptr(o), f.ldo = o.ld(), f.dout = bf16_ptr(dout), f.lddo = dout.ld();
    f.dq = bf16_ptr(dq), f.lddq = dq.ld(), f.dk = bf16_ptr(dk), f.lddk = dk.ld();
    f.dv = bf16_ptr(dv), f.lddv = dv.ld(), f.lse = const_cast<float*>(dev(lse));
    f.wide = cuda::flash_wide_loads(f);
    return flash_backward_launch(f, d.B, dev(scratch), xmat(dout), xmat(o));
  }
  cuda::ChunkShape c = cuda::chunk_shape(d.B, d.S, d.H, d.Hkv, d.D, mask.causal, chunk_rows_);
  c.key_start = key_start;
  c.key_start_host = mask.key_start.empty() ? nullptr : mask.key_start.data();
  check_scratch("attention_backward", scratch, cuda::chunked_backward_scratch_numel(c));
  ChunkOps ops{this, c};
  cuda::chunked_attention_backward(ops, c, xmat(dq), xmat(dk), xmat(dv), xmat(dout), xmat(q),
                                   xmat(k), xmat(v), xmat(o), dev(lse), dev(scratch));
}

// Note [Flash attention]: bf16 activations, head dim 32, 64 or 128, every matrix 4-byte aligned
// with even row strides (the kernels move bf16 pairs), unless MEMO_CUDA_ATTENTION says otherwise.
// The scratch was sized for them (bf16_attention_*_scratch_numel), so a tensor they cannot take
// is an error, not a fallback.
bool CudaBackend::flash_applies(const AttnDims& d, std::initializer_list<ConstTensor> ts) const {
  if (attention_kind_ != AttentionKind::kFlash || !cuda::flash_head_dim(d.D)) return false;
  for (const ConstTensor& t : ts)
    if (t.dtype() != DType::kBF16) return false;
  for (const ConstTensor& t : ts)
    MEMO_CHECK(t.ld() % 2 == 0 && reinterpret_cast<uintptr_t>(t.data()) % 4 == 0,
               "cuda flash attention: a bf16 tensor ", t.shape(), " with row stride ", t.ld(),
               " at ", t.data(), " (the kernels need even strides and 4-byte alignment; ",
               "MEMO_CUDA_ATTENTION=chunked runs the chunked schedule)");
  return true;
}

template <int kD>
void CudaBackend::flash_forward_launch_d(const cuda::FlashArgs& f, int64_t B) {
  constexpr int bytes = cuda::flash_forward_smem(kD);
  flash_smem<flash_forward_kernel<kD>>(bytes);
  const int64_t tiles = (f.S + cuda::kFlashRows - 1) / cuda::kFlashRows;
  if (tiles == 0 || B == 0) return;
  constexpr int64_t kMaxGridZ = 65535;  // a grid's z extent; more sequences take more launches
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridZ) {
    const int64_t n = std::min(kMaxGridZ, B - b0);
    flash_forward_kernel<kD>
        <<<dim3(unsigned(tiles), unsigned(f.H), unsigned(n)), cuda::kFlashThreads, bytes, s()>>>(
            f, tiles, b0);
    check_cuda(cudaGetLastError(), "flash attention forward launch");
  }
}
void CudaBackend::flash_forward_launch(const cuda::FlashArgs& f, int64_t B) {
  if (f.D == 32) return flash_forward_launch_d<32>(f, B);
  if (f.D == 64) return flash_forward_launch_d<64>(f, B);
  return flash_forward_launch_d<128>(f, B);
}
template <int kD>
void CudaBackend::flash_backward_launch_d(const cuda::FlashArgs& f, int64_t b, int64_t tiles) {
  constexpr int bytes = cuda::flash_backward_smem(kD);
  flash_smem<flash_dq_kernel<kD>>(bytes);
  flash_smem<flash_dkdv_kernel<kD>>(bytes);
  flash_dq_kernel<kD>
      <<<dim3(unsigned(tiles), unsigned(f.H)), cuda::kFlashThreads, bytes, s()>>>(f, b, tiles);
  check_cuda(cudaGetLastError(), "flash attention dq launch");
  flash_dkdv_kernel<kD>
      <<<dim3(unsigned(tiles), unsigned(f.H / f.G)), cuda::kFlashThreads, bytes, s()>>>(f, b);
  check_cuda(cudaGetLastError(), "flash attention dk/dv launch");
}
void CudaBackend::flash_backward_launch(cuda::FlashArgs f, int64_t B, float* delta, cuda::XMat dout,
                                        cuda::XMat o) {
  const int64_t tiles = (f.S + cuda::kFlashRows - 1) / cuda::kFlashRows;
  if (tiles == 0) return;
  f.delta = delta;
  for (int64_t b = 0; b < B; ++b) {  // delta of sequence b, then its two kernels
    chunk_delta_launch(delta, dout, o, f.H, f.S, f.D, b);
    if (f.D == 32)
      flash_backward_launch_d<32>(f, b, tiles);
    else if (f.D == 64)
      flash_backward_launch_d<64>(f, b, tiles);
    else
      flash_backward_launch_d<128>(f, b, tiles);
  }
}

void CudaBackend::zero_launch(Mat X) {
  launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) { X.at(t, c) = 0.0f; });
}
void CudaBackend::chunk_delta_launch(float* delta, cuda::XMat dout, cuda::XMat o, int64_t H,
                                     int64_t S, int64_t D, int64_t b) {
  launch(H * S, [=] __device__(int64_t i) {
    cuda::chunk_delta_item(delta, dout, o, S, D, b, i / S, i % S);
  });
}
void CudaBackend::grad_scores_launch(cuda::ScoreRows sc, float* dp, uint16_t* ds16,
                                     const float* lse_b, const float* delta, int64_t H, int64_t S) {
  if (sc.n == 0) return;
  chunk_grad_scores_kernel<<<unsigned(H * sc.n), kThreads, 0, s()>>>(sc, dp, ds16, lse_b, delta, S);
  check_cuda(cudaGetLastError(), "chunk grad scores launch");
}
void CudaBackend::round_rows_launch(cuda::XMat dst, cuda::XMat src) {
  launch_rc(dst.rows, dst.cols, [=] __device__(int64_t t, int64_t c) {
    dst.at(t, c) = float(src.at(t, c));  // dst bf16: rounded once
  });
}

}  // namespace memo::cuda_impl
