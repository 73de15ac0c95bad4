// What the CUDA backend's files share (private to cuda/; nvcc only): the CUDA and cuBLASLt error
// checks, the cuBLASLt table, the device-tensor accessors, the grid-stride launch, the streams
// and allocators, and the CudaBackend class. Its members are defined one kernel family a file,
// mirroring cpu/: matmul.cu, norms.cu, elementwise.cu, tensor_ops.cu, loss.cu, attention.cu,
// attention_merge.cu, attention_decode.cu, optim_kernels.cu; the core (construction, memory,
// copies, the profile) in cuda_backend.cu, streams and allocators in streams.cu, the cuBLASLt
// loader in cublaslt.cu, the tensor accessors in device_tensors.cu.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memo/backend/checks.h"
#include "memo/core/error.h"
#include "memo/cuda/bodies.h"
#include "memo/cuda/chunked_attention.h"
#include "memo/cuda/cuda_backend.h"
#include "memo/cuda/flash_attention.h"

namespace memo::cuda_impl {

using cuda::CMat;
using cuda::Mat;

void check_cuda(cudaError_t e, const char* what);
void check_lt(cublasStatus_t s, const char* what);

// The cuBLASLt functions memo calls, resolved at run time (Note [Loading cuBLASLt] in cublaslt.cu).
#define MEMO_LT_FUNCTIONS(X)              \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetVersion)                   \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)
struct LtApi {
#define MEMO_LT_MEMBER(f) decltype(&::f) f = nullptr;
  MEMO_LT_FUNCTIONS(MEMO_LT_MEMBER)
#undef MEMO_LT_MEMBER
};
// The table, loaded on first use; throws ConfigError where cuBLASLt cannot be opened.
const LtApi& lt();

// --- device tensors (Note [Device tensors] in device_tensors.cu) ---
float* dev(Tensor t);
const float* dev(ConstTensor t);
void* dev_operand(ConstTensor t);
cudaDataType_t cuda_type(DType t);
void* dev_bytes(Tensor t);
const void* dev_bytes(ConstTensor t);
Mat mat(Tensor t);
CMat cmat(ConstTensor t);
cuda::XMat xmat(ConstTensor t);
cuda::XVec xvec(ConstTensor t);

// Grid-stride loop: f(i) for i in [0, n).
template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f(i);
}
constexpr int kThreads = 256;

// Item i of a rows x cols launch as (row, column): f(i / cols, i % cols).
template <class F>
struct RowCol {
  int64_t cols;
  F f;
  __device__ void operator()(int64_t i) const { f(i / cols, i % cols); }
};

// Row kernels in lanes (Note [Row lanes] in cuda/bodies.h): a block of kRowLanes threads a row,
// the lanes' partial sums combined in shared memory in the bodies' fixed tree.
// Note [Column lanes] (cuda/bodies.h): a block of kColWidth columns by kColLanes lanes; part(c,
// lane, lanes) is a lane's partial sum of column c; the lanes meet in the fixed tree of Note [Row
// lanes] and the column's sum is added into add_to[c] (a gradient, f32).
template <class Part>
__global__ void column_sums_kernel(float* add_to, int64_t cols, Part part) {
  __shared__ double a[cuda::kColWidth * cuda::kColLanes];
  const int cx = int(threadIdx.x) % cuda::kColWidth, lane = int(threadIdx.x) / cuda::kColWidth;
  const int64_t c = int64_t(blockIdx.x) * cuda::kColWidth + cx;
  double* column = a + cx * cuda::kColLanes;
  column[lane] = c < cols ? part(c, lane, cuda::kColLanes) : 0.0;
  for (int half = cuda::kColLanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (lane < half) cuda::row_tree_sum(column, lane, half);
  }
  if (lane == 0 && c < cols) add_to[c] = float(double(add_to[c]) + column[0]);  // lane 0 wrote it
}

__device__ inline void row_sum_tree(double* a, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::row_tree_sum(a, lane, half);
    __syncthreads();
  }
}

// --- events, streams, allocators (streams.cu) ---

class CudaEvent final : public EventState {
 public:
  explicit CudaEvent(cudaStream_t stream);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool done() const override;
  void synchronize() const override;
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, const StreamOptions& options);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  const std::string& name() const override { return name_; }
  cudaStream_t handle() const { return stream_; }
  void copy(void* dst, const void* src, int64_t bytes) override;
  Event record() override { return Event(std::make_shared<CudaEvent>(stream_)); }
  void wait(const Event& event) override;
  int64_t copied_bytes() const override { return copied_bytes_; }
  double busy_s() const override;
  double waited_s() const override;

 private:
  void harvest() const;
  void harvest_locked() const;

  std::string name_;
  StreamOptions options_;
  std::mt19937_64 rng_;
  cudaStream_t stream_ = nullptr;
  std::atomic<int64_t> copied_bytes_{0};
  mutable std::mutex mutex_;
  mutable std::deque<std::pair<cudaEvent_t, cudaEvent_t>> timings_;  // guarded by mutex_
  mutable double busy_s_ = 0.0;                                      // guarded by mutex_
  mutable std::deque<std::pair<cudaEvent_t, cudaEvent_t>> waits_;    // guarded by mutex_
  mutable double waited_s_ = 0.0;                                    // guarded by mutex_
};

class CudaDeviceAllocator final : public RawAllocator {
 public:
  MemSpace space() const override { return MemSpace::kDevice; }
  void* allocate(int64_t bytes, const char* what) override;
  void deallocate(void* p, int64_t) override { cudaFree(p); }
};

class CudaPinnedAllocator final : public RawAllocator {
 public:
  MemSpace space() const override { return MemSpace::kPinnedHost; }
  void* allocate(int64_t bytes, const char* what) override;
  void deallocate(void* p, int64_t) override { cudaFreeHost(p); }
};

// --- the backend ---

// cuBLASLt's workspace: what its fp32 kernels may use (Note [Matrix-product workspace]).
constexpr int64_t kWorkspaceBytes = kCudaWorkspaceBytes;
constexpr int64_t kWorkspaceAlign = kCudaWorkspaceAlign;

// Note [Kernel profile]
// MEMO_CUDA_PROFILE=1 times every kernel entry point of the backend with a pair of CUDA events on
// the compute stream and prints, when the backend is destroyed, the GPU time per entry point
// (calls, total, share) to stderr: where a step's time goes, without a profiler. Beside it, the
// host's wall time inside each entry point (launch overhead, algorithm choice, the waits of
// copies to the host) and the backend's whole lifetime: what the entry points leave of it is host
// work outside the backend (the model, strategies, allocators, data). A run whose GPU time is far
// below its wall time is bound by the host, not the kernels. The pending events are read back
// every 4,096 calls (a stream synchronisation, so timings under it are slightly perturbed); off
// by default, when each entry point costs one branch.
//
// nvcc allows a __device__ lambda only in a public member function (the extended-lambda rules):
// every member that defines one is public.
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  class Timed {
   public:
    // An entry point called by another (a reduction's copy to the host) counts in its caller's.
    Timed(CudaBackend* b, const char* op);
    ~Timed();
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    CudaBackend* b_;
    const char* op_;
    cudaEvent_t start_ = nullptr;
    std::chrono::steady_clock::time_point host_start_;
  };

  const char* name() const override { return "cuda"; }
  std::string describe() const override { return description_; }
  std::string device_name() const override { return device_name_; }
  // cuBLASLt wants its workspace 256-byte aligned; activation buffers are 64-byte aligned, so the
  // request has room to align the start up.
  int64_t matmul_workspace_bytes() const override { return cuda_matmul_workspace_bytes(); }
  void set_matmul_workspace(Tensor workspace) override;
  bool has_values() const override { return true; }
  int64_t reproducible_rows() const override { return kCudaPanelRows; }
  DType activation_dtype() const override { return DType::kF32; }
  bool bf16_products() const override { return true; }
  // The chunked and the fused attention take bf16 activations (Notes [Chunked attention] and
  // [Flash attention]).
  bool bf16_attention() const override { return true; }
  // key_start (backend/attn_mask.h) in the chunked schedule and the fused kernels
  bool masked_attention() const override { return true; }
  // The layers' row and elementwise kernels take bf16 activations and weights (Note [bf16
  // bodies]).
  bool bf16_elementwise() const override { return true; }
  MemSpace device_space() const override { return MemSpace::kDevice; }
  RawAllocator& allocator(MemSpace space) override {
    return pick_allocator(space, {&host_, &pinned_, &device_}, "cuda");
  }
  bool host_can_access(MemSpace space) const override {
    return space == MemSpace::kHost || space == MemSpace::kPinnedHost;
  }
  int64_t device_free_bytes() override;
  Stream& compute_stream() override { return *compute_; }
  cudaStream_t compute_handle() const { return compute_->handle(); }
  int device() const { return gpu_; }
  std::unique_ptr<Stream> make_copy_stream(std::string name,
                                           const StreamOptions& options) override {
    return std::make_unique<CudaStream>(std::move(name), options);
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override;
  void copy_from_host(void* dst, const void* src, int64_t bytes) override;
  double measure_matmul_peak_flops(double seconds) override {
    return measure_peak(seconds, DType::kF32);
  }
  double measure_bf16_matmul_peak_flops(double seconds) override {
    return measure_peak(seconds, DType::kBF16);
  }
  double measure_peak(double seconds, DType operands);

  bool host_reads_ids(const int32_t* ids) const override { return on_host(ids); }

  // --- kernels (one file a family, see the top of this header), after the entry checks (Note
  // [Checked entry points] in backend/backend.h); public, as nvcc's extended lambdas need ---
  void do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
                 float beta) override;
  void do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) override;
  void do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) override;
  void do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                          float eps) override;
  void do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                           ConstTensor inv_rms) override;
  void do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                            ConstTensor b, float eps) override;
  void do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                             ConstTensor w, ConstTensor mean, ConstTensor rstd) override;
  void do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                     double attention_factor, int64_t first_position) override;
  void do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                       int64_t first_row) override;
  void do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                        int64_t first_row) override;
  void do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) override;
  void do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                          ConstTensor u) override;
  void do_gelu_forward(Tensor y, ConstTensor x) override;
  void do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) override;
  void do_bias_add(Tensor y, ConstTensor b) override;
  void do_bias_backward(Tensor db, ConstTensor dy) override;
  void do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) override;
  void do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) override;
  void do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                        View<const int32_t> targets, float grad_scale) override;
  void do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                  View<const int32_t> targets) override;
  void do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                            View<const int32_t> targets, ConstTensor stats,
                            ConstTensor target_logit, float grad_scale) override;
  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override;
  void do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                            AttnMask mask) override;
  int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                               int64_t n_kv_heads) override;
  int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                int64_t n_kv_heads) override;
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override;
  void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                             ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                             int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                             AttnMask mask) override;
  void do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) override;
  int64_t attention_decode_scratch_numel(int64_t) override { return 1; }
  void do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                           int64_t n_heads, int64_t n_kv_heads, Tensor scratch) override;
  void do_copy(Tensor dst, ConstTensor src) override;
  void do_convert(Tensor dst, ConstTensor src) override;
  void do_fill(Tensor dst, float value) override;
  void do_scale(Tensor x, float factor) override;
  void do_add_into(Tensor dst, ConstTensor src) override;
  double do_sum(ConstTensor x) override;
  double do_sum_squares(ConstTensor x) override;
  int64_t noise_probe_partial_numel(int64_t n) override {
    return cuda_noise_probe_partial_numel(n);
  }
  double do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                             View<double> partial) override;
  void do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& st) override;
  void do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& st) override;
  void do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) override;
  void do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) override;
  void do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& st) override;
  void do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                         const RmspropStep& st) override;
  void do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& st) override;
  // Adafactor's scratch, in device memory: R or one per 1,024-element chunk, and a slot for the
  // mean of the row means.
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override {
    return cuda_adafactor_partial_numel(rows, numel);
  }
  double do_adafactor_rms(ConstTensor x, View<double> partial) override;
  void do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row_t, Tensor col_t, ConstTensor g,
                                  Tensor row_inv, Tensor col_inv, View<double> partial,
                                  const AdafactorStep& st) override;
  void do_adafactor_update_vector(Tensor p, Tensor m, Tensor v_t, ConstTensor g,
                                  View<double> partial, const AdafactorStep& st) override;

  // --- what the kernel files share ---
  cudaStream_t s() const { return compute_->handle(); }
  template <class F>
  void launch(int64_t n, F f) {
    if (n <= 0) return;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20);
    for_each_kernel<<<unsigned(blocks), kThreads, 0, s()>>>(n, f);
    check_cuda(cudaGetLastError(), "kernel launch");
  }
  // Note [Column lanes]: add_to[c] += the sum over its rows of column c, for c < cols.
  template <class Part>
  void launch_column_sums(float* add_to, int64_t cols, Part part) {
    if (cols <= 0) return;
    const int64_t blocks = (cols + cuda::kColWidth - 1) / cuda::kColWidth;
    column_sums_kernel<<<unsigned(blocks), cuda::kColWidth * cuda::kColLanes, 0, s()>>>(add_to,
                                                                                        cols, part);
    check_cuda(cudaGetLastError(), "column sums launch");
  }
  // f(t, c) for every element of a rows x cols matrix.
  template <class F>
  void launch_rc(int64_t rows, int64_t cols, F f) {
    launch(rows * cols, RowCol<F>{cols, f});
  }
  // The activations of one attention call share one dtype (f32 or bf16); the log-sum-exp and the
  // scratch are f32.
  void check_attention_dtypes(const char* op, std::initializer_list<ConstTensor> acts,
                              std::initializer_list<ConstTensor> f32s) const;
  // Note [Flash attention]: whether the fused kernels take this call (attention.cu).
  bool flash_applies(const AttnDims& d, std::initializer_list<ConstTensor> ts) const;
  void flash_forward_launch(const cuda::FlashArgs& f, int64_t B);
  template <int kD>
  void flash_forward_launch_d(const cuda::FlashArgs& f, int64_t B);
  void flash_backward_launch(cuda::FlashArgs f, int64_t B, float* delta, cuda::XMat dout,
                             cuda::XMat o);
  template <int kD>
  void flash_backward_launch_d(const cuda::FlashArgs& f, int64_t b, int64_t tiles);
  // The operations of the chunked schedule (Note [Chunked attention]) on the compute stream.
  void row_gemm(const cuda::RowGemm& g);
  void zero_launch(Mat X);
  void chunk_delta_launch(float* delta, cuda::XMat dout, cuda::XMat o, int64_t H, int64_t S,
                          int64_t D, int64_t b);
  void grad_scores_launch(cuda::ScoreRows sc, float* dp, uint16_t* ds16, const float* lse_b,
                          const float* delta, int64_t H, int64_t S);
  void round_rows_launch(cuda::XMat dst, cuda::XMat src);
  template <int kMaxD>
  void attention_decode_launch(Mat O, CMat Q, CMat K, CMat V, int64_t first, int64_t G, int64_t D,
                               int64_t H);
  void rotate(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim, int64_t first_row,
              float sign);
  void adam(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st, bool decoupled);
  void launch_convert_to_bf16(uint16_t* d, const float* x, int64_t n);
  void launch_convert_from_bf16(float* d, const uint16_t* x, int64_t n);
  // n doubles of device memory, copied to the host and added in index order.
  double host_ordered_sum(const double* device, int64_t n);
  // Chunk sums on the device, added in chunk order on the host.
  double ordered_sum(CMat x, bool squares);
  // Device scratch the backend owns, grown on demand (growing frees the old block: cudaFree waits
  // for the work that may still read it).
  double* device_doubles(int64_t n);
  // Whether the host can read p (ordinary or pinned host memory, not device memory).
  static bool on_host(const void* p);
  // Token ids in device memory (the model copies them there) are used in place; ids in host memory
  // (a caller of the kernel alone) are copied up on the compute stream first, a later copy being
  // ordered after the kernel that reads them.
  const int32_t* device_ids(View<const int32_t> ids);
  // A mask's key_start copied to device memory (key_start_, reused: the copy is stream-ordered);
  // null for an empty one.
  const int32_t* device_key_start(View<const int32_t> key_start);
  void matmul_unchecked(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                        float alpha, float beta);
  // A and B of type ab (f32 or bf16), C of type ct; f32 accumulation and scalars. batch > 1: a
  // strided batch, the i-th product's X at X + i stride_x elements.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
            void* C, int64_t ldc, cudaDataType_t ab, cudaDataType_t ct, int64_t batch = 1,
            int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0);

  int64_t chunk_rows_ = 0;  // set_cuda_attention_chunk_rows (tests); 0: the budget's
  // MEMO_CUDA_ATTENTION: flash (the default; bf16 only, Note [Flash attention]) or chunked;
  // set_cuda_flash_attention (tests)
  enum class AttentionKind { kFlash, kChunked };
  AttentionKind attention_kind_ = AttentionKind::kFlash;

 private:
  struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  struct OpTime {
    int64_t calls = 0;
    double ms = 0.0;       // GPU time between the entry point's two events
    double host_ms = 0.0;  // the host's wall time inside the entry point
  };
  // (transposes, m, n, k, leading dimensions, alignment, workspace bytes, operand and result
  // types, batch and its strides)
  using GemmKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                             int64_t, int, int, int64_t, int64_t, int64_t, int64_t>;

  cudaEvent_t timing_event();
  void harvest_timings();
  void print_profile();

  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  bool profile_ = false;
  int timed_depth_ = 0;  // 1 inside a profiled entry point
  std::map<std::string, OpTime> op_times_;
  std::vector<std::tuple<const char*, cudaEvent_t, cudaEvent_t>> pending_;

  HostAllocator host_{MemSpace::kHost};
  CudaPinnedAllocator pinned_;
  CudaDeviceAllocator device_;
  std::unique_ptr<CudaStream> compute_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;  // the caller's (Note [Matrix-product workspace]); null: none
  int64_t workspace_bytes_ = 0;
  RawBuffer doubles_, ids_, key_start_;
  std::vector<double> host_doubles_;
  std::map<GemmKey, Gemm> gemms_;  // the algorithm of each shape
  std::string description_;
  std::string device_name_;  // cudaDeviceProp::name
  int gpu_ = 0;              // the device index
};

}  // namespace memo::cuda_impl
