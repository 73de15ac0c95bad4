// The CUDA backend's matrix products (backend_impl.cuh): cuBLASLt, one algorithm fixed per shape,
// alignment and workspace; token-panel products one call per kCudaPanelRows rows (Note
// [Reproducible rows]); the chunked attention's strided-batched products; the measured peak.
#include <algorithm>
#include <chrono>

#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

// The largest power of two (at most 256) that divides every address: cuBLASLt picks kernels by
// the alignment it is promised, and a column slice of a weight is aligned to less than 256.
// A strided batch's later matrices start `stride` elements on: the promise covers them too.
int alignment_of(std::initializer_list<const void*> ptrs,
                 std::initializer_list<int64_t> batch_stride_bytes = {}) {
  int align = 256;
  for (const void* p : ptrs)
    while (align > 2 && reinterpret_cast<uintptr_t>(p) % uintptr_t(align) != 0) align /= 2;
  for (const int64_t bytes : batch_stride_bytes)
    while (align > 2 && bytes % align != 0) align /= 2;
  return align;
}

}  // namespace

void CudaBackend::do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                            float alpha, float beta) {
  const Timed timed(this, "matmul");
  matmul_unchecked(c, a, b, trans_a, trans_b, alpha, beta);
}

void CudaBackend::do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  const Timed timed(this, "matmul_token_panels");
  for (int64_t r = 0; r < c.rows(); r += kCudaPanelRows) {
    const int64_t e = std::min(c.rows(), r + kCudaPanelRows);
    matmul_unchecked(c.slice_rows(r, e), a.slice_rows(r, e), b, false, true, 1.0f, beta);
  }
}

void CudaBackend::do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  const Timed timed(this, "matmul_token_panels_kn");
  for (int64_t r = 0; r < c.rows(); r += kCudaPanelRows) {
    const int64_t e = std::min(c.rows(), r + kCudaPanelRows);
    matmul_unchecked(c.slice_rows(r, e), a.slice_rows(r, e), b, false, false, 1.0f, beta);
  }
}

// Column-major C[m, n] = alpha op(A) op(B) + beta C (cuBLASLt's convention). bf16 operands
// accumulate in f32 (CUBLAS_COMPUTE_32F) and a bf16 C is rounded once.
void CudaBackend::gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                       float beta, void* C, int64_t ldc, cudaDataType_t ab, cudaDataType_t ct,
                       int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  const int64_t ab_bytes = ab == CUDA_R_16BF ? 2 : 4, c_bytes = ct == CUDA_R_16BF ? 2 : 4;
  const int align =
      batch > 1
          ? alignment_of({A, B, C}, {stride_a * ab_bytes, stride_b * ab_bytes, stride_c * c_bytes})
          : alignment_of({A, B, C});
  const auto key =
      std::make_tuple(int(ta), int(tb), m, n, k, lda, ldb, ldc, align, workspace_bytes_, int(ab),
                      int(ct), batch, stride_a, stride_b, stride_c);
  auto it = gemms_.find(key);
  if (it == gemms_.end()) {
    Gemm g;
    check_lt(lt().cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    check_lt(
        lt().cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "transa");
    check_lt(
        lt().cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "transb");
    const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
    check_lt(
        lt().cublasLtMatrixLayoutCreate(&g.a, ab, uint64_t(na ? m : k), uint64_t(na ? k : m), lda),
        "layout a");
    check_lt(
        lt().cublasLtMatrixLayoutCreate(&g.b, ab, uint64_t(nb ? k : n), uint64_t(nb ? n : k), ldb),
        "layout b");
    check_lt(lt().cublasLtMatrixLayoutCreate(&g.c, ct, uint64_t(m), uint64_t(n), ldc), "layout c");
    if (batch > 1) {
      const int32_t count = int32_t(batch);
      for (auto [layout, stride] :
           {std::pair{g.a, stride_a}, std::pair{g.b, stride_b}, std::pair{g.c, stride_c}}) {
        check_lt(lt().cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &count, sizeof count),
                 "batch count");
        check_lt(lt().cublasLtMatrixLayoutSetAttribute(
                     layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 "batch stride");
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(lt().cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = uint64_t(workspace_bytes_);
    const uint32_t al = uint32_t(align);
    lt().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al);
    // A bf16 C is rounded once (Note [bf16 storage by conversion]): split-K partial sums may meet
    // in the workspace in f32, never in C's own bf16 (the in-place and output-type schemes). The
    // first GPU run's bf16 products with beta = 1 were off by whole bf16 steps of the partial sums
    // where cuBLASLt's heuristic split K (2026-12-04: 1.5e-3 against 7.9e-4 at M 300, N 96, K 256).
    if (ct == CUDA_R_16BF) {
      const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      check_lt(lt().cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
               "reduction scheme");
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = lt().cublasLtMatmulAlgoGetHeuristic(lt_, g.desc, g.a, g.b, g.c, g.c,
                                                                  pref, 1, &result, &found);
    lt().cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
      throw Error(str("cuBLASLt: no algorithm for ", ab == CUDA_R_16BF ? "bf16" : "f32",
                      " operands into ", ct == CUDA_R_16BF ? "bf16" : "f32", ", m ", m, ", n ", n,
                      ", k ", k, ", lda ", lda, ", ldb ", ldb, ", ldc ", ldc, ", alignment ", align,
                      batch > 1 ? str(", batch ", batch) : std::string()));
    g.algo = result.algo;
    it = gemms_.emplace(key, g).first;
  }
  const Gemm& g = it->second;
  check_lt(lt().cublasLtMatmul(lt_, g.desc, &alpha, A, g.a, B, g.b, &beta, C, g.c, C, g.c, &g.algo,
                               workspace_, size_t(workspace_bytes_), s()),
           "cublasLtMatmul");
}

// Row-major c[M, N] = alpha op(a) op(b) + beta c is column-major c^T = op(b)^T op(a)^T: the
// operands swap and each keeps its own transpose flag.
void CudaBackend::matmul_unchecked(Tensor c, ConstTensor a, ConstTensor b, bool trans_a,
                                   bool trans_b, float alpha, float beta) {
  const int64_t M = c.rows(), N = c.cols(), K = trans_a ? a.rows() : a.cols();
  MEMO_CHECK(a.dtype() == b.dtype(), "cuda: a product of ", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()), " operands: both f32 or both bf16");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // c = beta c, on any strided c
    const Mat C = mat(c);
    launch_rc(C.rows, C.cols, [=] __device__(int64_t t, int64_t j) {
      C.at(t, j) = beta == 0.0f ? 0.0f : beta * C.at(t, j);
    });
    return;
  }
  gemm(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, alpha,
       dev_operand(b), b.ld(), dev_operand(a), a.ld(), beta, dev_operand(c), c.ld(),
       cuda_type(a.dtype()), cuda_type(c.dtype()));
}

// Row-major strided-batched C = alpha op(A) op(B) + beta C: column-major C^T = op(B)^T op(A)^T,
// as matmul_unchecked.
void CudaBackend::row_gemm(const cuda::RowGemm& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  gemm(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m, g.k,
       g.alpha, g.b, g.ldb, g.a, g.lda, g.beta, g.c, g.ldc, g.ab_bf16 ? CUDA_R_16BF : CUDA_R_32F,
       g.c_bf16 ? CUDA_R_16BF : CUDA_R_32F, g.batch, g.stride_b, g.stride_a, g.stride_c);
}

// Square products of `operands` (f32, or bf16 into a bf16 result as a bf16 run's activations).
double CudaBackend::measure_peak(double seconds, DType operands) {
  constexpr int64_t n = 4096;
  const int64_t bytes = n * n * dtype_bytes(operands);
  RawBuffer a(device_, bytes, "peak a"), b(device_, bytes, "peak b"), c(device_, bytes, "peak c"),
      wide(device_, n * n * 4, "peak f32");
  const Tensor A = a.tensor({n, n}, operands), B = b.tensor({n, n}, operands),
               C = c.tensor({n, n}, operands), W = wide.tensor({n, n}, DType::kF32);
  // the ceiling with the workspace the model's products get (Note [Matrix-product workspace])
  RawBuffer ws(device_, matmul_workspace_bytes(), "peak workspace");
  set_matmul_workspace(ws.tensor({matmul_workspace_bytes() / 4}, DType::kF32));
  struct Unset {
    CudaBackend* b;
    ~Unset() { b->set_matmul_workspace(Tensor()); }
  } const unset{this};
  fill(W, 0.5f);
  convert(A, W);
  fill(W, 0.25f);
  convert(B, W);
  matmul(C, A, B, false, false, 1.0f, 0.0f);  // warm-up: algorithm, clocks
  cudaEvent_t start, end;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&end), "cudaEventCreate");
  int reps = 1;
  double best = 0.0;
  for (auto t0 = std::chrono::steady_clock::now();
       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds;) {
    cudaEventRecord(start, s());
    for (int r = 0; r < reps; ++r) matmul(C, A, B, false, false, 1.0f, 0.0f);
    cudaEventRecord(end, s());
    check_cuda(cudaEventSynchronize(end), "peak");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, end);
    best = std::max(best, 2.0 * double(n) * n * n * reps / (double(ms) * 1e-3));
    reps = std::min(reps * 2, 64);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return best;
}

}  // namespace memo::cuda_impl
