// The CUDA backend: see cuda_backend.h. Every kernel is a grid-stride loop over work items that
// calls one body of cuda/bodies.h (the same code tests/cuda/bodies_test.cc runs on the CPU).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "memo/core/error.h"
#include "memo/cuda/bodies.h"
#include "memo/cuda/chunked_attention.h"
#include "memo/cuda/cuda_backend.h"
#include "memo/cuda/flash_attention.h"
#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"

namespace memo {
namespace {

using cuda::CMat;
using cuda::Mat;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(str("CUDA: ", what, ": ", cudaGetErrorString(e)));
}
void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(str("cuBLASLt: ", what, ": status ", int(s)));
}

// Note [Loading cuBLASLt]
// cuBLASLt is opened when the first CUDA backend starts, not when memo starts: loading it alone
// makes a process resident in ~210 MB (a program that only links it peaks at 212 MB RSS against
// 1.5 MB for libcudart), which every CPU run would otherwise pay. Its functions are called through
// this table, resolved once; a machine without it gets a one-line error for --device cuda only.
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
#define MEMO_STRINGIFY_(x) #x
#define MEMO_STRINGIFY(x) MEMO_STRINGIFY_(x)
const LtApi& lt() {
  static const LtApi api = [] {
    const char* const names[] = {"libcublasLt.so." MEMO_STRINGIFY(CUBLAS_VER_MAJOR),
                                 "libcublasLt.so"};
    void* lib = nullptr;
    for (const char* name : names)
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!lib)
      throw ConfigError(str("--device cuda: cannot load cuBLASLt (", dlerror(),
                            "); put the CUDA toolkit's library folder on LD_LIBRARY_PATH"));
    LtApi a;
#define MEMO_LT_LOAD(f)                                  \
  a.f = reinterpret_cast<decltype(a.f)>(dlsym(lib, #f)); \
  if (!a.f) throw ConfigError(str("--device cuda: cuBLASLt has no ", #f, " (", dlerror(), ")"));
    MEMO_LT_FUNCTIONS(MEMO_LT_LOAD)
#undef MEMO_LT_LOAD
    return a;
  }();
  return api;
}

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

// Grid-stride loop: f(i) for i in [0, n).
template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f(i);
}
constexpr int kThreads = 256;

// Row kernels in lanes (Note [Row lanes] in cuda/bodies.h): a block of kRowLanes threads a row,
// the lanes' partial sums combined in shared memory in the bodies' fixed tree.
__device__ void row_sum_tree(double* a, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::row_tree_sum(a, lane, half);
    __syncthreads();
  }
}
__global__ void rmsnorm_forward_kernel(cuda::XMat y, float* inv_rms, cuda::XMat x, cuda::XVec w,
                                       float eps) {
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  a[lane] = cuda::rmsnorm_sumsq_part(x, t, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  const float r = cuda::rmsnorm_inv_rms(a[0], x.cols, eps);
  if (lane == 0) inv_rms[t] = r;
  cuda::rmsnorm_write_part(y, x, w, r, t, lane, cuda::kRowLanes);
}
__global__ void rmsnorm_dx_kernel(cuda::XMat dx, cuda::XMat dy, cuda::XMat x, cuda::XVec w,
                                  const float* r) {
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  a[lane] = cuda::rmsnorm_dot_part(dy, x, w, t, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  cuda::rmsnorm_dx_part(dx, dy, x, w, r, a[0], t, lane, cuda::kRowLanes);
}
__device__ void row_max_tree(float* a, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::row_tree_max(a, lane, half);
    __syncthreads();
  }
}
// Two sums in one tree (each of a and b its own).
__device__ void row_sum_tree2(double* a, double* b, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) {
      cuda::row_tree_sum(a, lane, half);
      cuda::row_tree_sum(b, lane, half);
    }
    __syncthreads();
  }
}
__global__ void layernorm_forward_kernel(cuda::XMat y, float* mean, float* rstd, cuda::XMat x,
                                         cuda::XVec w, cuda::XVec b, float eps) {
  __shared__ double sum[cuda::kRowLanes], sum_sq[cuda::kRowLanes];  // two: no read-write race
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const double C = double(x.cols);
  sum[lane] = cuda::layernorm_sum_part(x, t, lane, cuda::kRowLanes);
  row_sum_tree(sum, lane);
  const double m = sum[0] / C;
  sum_sq[lane] = cuda::layernorm_sumsq_part(x, m, t, lane, cuda::kRowLanes);
  row_sum_tree(sum_sq, lane);
  const double r = 1.0 / ::sqrt(sum_sq[0] / C + double(eps));
  if (lane == 0) {
    mean[t] = float(m);
    rstd[t] = float(r);
  }
  cuda::layernorm_write_part(y, x, w, b, m, r, t, lane, cuda::kRowLanes);
}
__global__ void layernorm_dx_kernel(cuda::XMat dx, cuda::XMat dy, cuda::XMat x, cuda::XVec w,
                                    const float* mean, const float* rstd) {
  __shared__ double sg[cuda::kRowLanes], sgx[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const double m = mean[t], r = rstd[t];
  double g, gx;  // in registers, then shared
  cuda::layernorm_grad_sums_part(dy, x, w, m, r, t, lane, cuda::kRowLanes, g, gx);
  sg[lane] = g;
  sgx[lane] = gx;
  row_sum_tree2(sg, sgx, lane);
  cuda::layernorm_dx_part(dx, dy, x, w, m, r, sg[0], sgx[0], t, lane, cuda::kRowLanes);
}
__global__ void cross_entropy_kernel(float* losses, Mat dlogits, CMat logits,
                                     const int32_t* targets, float grad_scale) {
  __shared__ float mx[cuda::kRowLanes];
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const int32_t y = targets[t];
  const float target_logit = logits.at(t, y);  // read before any lane writes (dlogits may alias)
  mx[lane] = cuda::ce_max_part(logits, t, lane, cuda::kRowLanes);
  row_max_tree(mx, lane);
  const float m = mx[0];
  a[lane] = cuda::ce_sum_part(logits, t, m, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  const double sum = a[0];
  if (lane == 0) losses[t] = cuda::ce_loss(m, sum, target_logit);
  if (dlogits.p != nullptr)
    cuda::ce_grad_part(dlogits, logits, t, m, sum, y, grad_scale, lane, cuda::kRowLanes);
}

// The backward's probabilities and their gradient over one chunk (Note [Chunked attention]): a
// block per score row, its threads over the columns (no per-element divisions).
__global__ void chunk_grad_scores_kernel(cuda::ScoreRows sc, float* dp, uint16_t* ds16,
                                         const float* lse_b, const float* delta, int64_t S) {
  const int64_t h = blockIdx.x / sc.n, r = blockIdx.x % sc.n;
  for (int64_t t = threadIdx.x; t < sc.kend; t += blockDim.x)
    cuda::grad_scores_item(sc, dp, ds16, lse_b, delta, S, h, r, t);
}

// The softmax of one chunk's score rows (Note [Chunked attention]): a block a row, a thread a
// lane, the lanes' (max, sum) combined in shared memory in the fixed tree of chunked_attention.h.
__global__ void chunk_softmax_kernel(cuda::ScoreRows sc, float* lse_b, int64_t S) {
  __shared__ float m[cuda::kSoftmaxLanes], l[cuda::kSoftmaxLanes];
  const int64_t h = blockIdx.x / sc.n, r = blockIdx.x % sc.n;
  float* s = sc.row(h, r);
  const int64_t visible = sc.visible(r);
  const int lane = int(threadIdx.x);
  float lm, ll;  // in registers: s may alias shared memory as far as the compiler knows
  cuda::softmax_lane(s, visible, lane, cuda::kSoftmaxLanes, lm, ll);
  m[lane] = lm;
  l[lane] = ll;
  __syncthreads();
  for (int half = cuda::kSoftmaxLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::softmax_tree_step(m, l, lane, half);
    __syncthreads();
  }
  const float mx = m[0], sum = l[0];
  for (int64_t t = lane; t < sc.kend; t += cuda::kSoftmaxLanes)
    sc.put_prob(h, r, t, cuda::softmax_prob(s[t], t, visible, mx, sum));
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
// Blocks over (tile, head, sequence); the causal forward and dQ start with the last query tiles,
// the longest, so the short ones fill the tail.
template <int kD>
__global__ void __launch_bounds__(cuda::kFlashThreads)
    flash_forward_kernel(cuda::FlashArgs f, int64_t tiles) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  FlashLane th{int(threadIdx.x), flash_smem};
  const int64_t tile = f.causal ? tiles - 1 - blockIdx.x : blockIdx.x;
  cuda::flash_forward_block<kD>(th, f, blockIdx.z, blockIdx.y, tile * cuda::kFlashRows);
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

// CALL(kMaxD, kExact) for the instantiation head_dim_kind(D) names (in a CudaBackend member).
#define MEMO_HEAD_DIM_DISPATCH(D, op, CALL) \
  switch (head_dim_kind(D, op)) {           \
    case -32:                               \
      CALL(32, true);                       \
      break;                                \
    case -64:                               \
      CALL(64, true);                       \
      break;                                \
    case -128:                              \
      CALL(128, true);                      \
      break;                                \
    case 64:                                \
      CALL(64, false);                      \
      break;                                \
    case 128:                               \
      CALL(128, false);                     \
      break;                                \
    default:                                \
      CALL(256, false);                     \
  }

// Item i of a rows x cols launch as (row, column): f(i / cols, i % cols).
template <class F>
struct RowCol {
  int64_t cols;
  F f;
  __device__ void operator()(int64_t i) const { f(i / cols, i % cols); }
};

// --- events, streams, allocators ---

class CudaEvent final : public EventState {
 public:
  explicit CudaEvent(cudaStream_t stream) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool done() const override {
    const cudaError_t r = cudaEventQuery(event_);
    if (r == cudaErrorNotReady) return false;
    check_cuda(r, "cudaEventQuery");
    return true;
  }
  void synchronize() const override {
    check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

void sleep_host_fn(void* seconds) {
  const double s = *static_cast<double*>(seconds);
  delete static_cast<double*>(seconds);
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, const StreamOptions& options)
      : name_(std::move(name)), options_(options), rng_(options.random_delay_seed) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    harvest();
    for (auto& [start, end] : timings_) cudaEventDestroy(start), cudaEventDestroy(end);
    for (auto& [start, end] : waits_) cudaEventDestroy(start), cudaEventDestroy(end);
    cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  const std::string& name() const override { return name_; }
  cudaStream_t handle() const { return stream_; }

  // A delay (the test's random one, or the throttle's n / bandwidth) runs as a host function
  // queued before the copy: later work on this stream waits for it, the calling thread does not
  // (CUDA may run the host functions of different streams one at a time).
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    if (options_.max_random_delay_s > 0.0)  // outside the timed range, as on the CPU
      check_cuda(cudaLaunchHostFunc(stream_, sleep_host_fn,
                                    new double(std::uniform_real_distribution<double>(
                                        0.0, options_.max_random_delay_s)(rng_))),
                 "cudaLaunchHostFunc");
    cudaEvent_t start, end;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&end), "cudaEventCreate");
    check_cuda(cudaEventRecord(start, stream_), "cudaEventRecord");
    // The throttle sleeps n / bandwidth before the copy, inside the timed range: a copy then takes
    // at least that long and busy_s() counts it (the copy itself adds its own time on top).
    if (options_.bandwidth_bytes_per_s > 0.0)
      check_cuda(cudaLaunchHostFunc(stream_, sleep_host_fn,
                                    new double(double(bytes) / options_.bandwidth_bytes_per_s)),
                 "cudaLaunchHostFunc");
    check_cuda(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream_),
               "cudaMemcpyAsync");
    check_cuda(cudaEventRecord(end, stream_), "cudaEventRecord");
    copied_bytes_ += bytes;
    std::lock_guard<std::mutex> lock(mutex_);
    timings_.emplace_back(start, end);
    harvest_locked();
  }
  Event record() override { return Event(std::make_shared<CudaEvent>(stream_)); }
  // A wait between two timing events of this stream: the time between them is the time the
  // stream stood still (waited_s).
  void wait(const Event& event) override {
    if (!event.state()) return;
    if (const auto* e = dynamic_cast<const CudaEvent*>(event.state().get())) {
      if (e->done()) return;
      cudaEvent_t before, after;
      check_cuda(cudaEventCreate(&before), "cudaEventCreate");
      check_cuda(cudaEventCreate(&after), "cudaEventCreate");
      check_cuda(cudaEventRecord(before, stream_), "cudaEventRecord");
      check_cuda(cudaStreamWaitEvent(stream_, e->event(), 0), "cudaStreamWaitEvent");
      check_cuda(cudaEventRecord(after, stream_), "cudaEventRecord");
      std::lock_guard<std::mutex> lock(mutex_);
      waits_.emplace_back(before, after);
      harvest_locked();
    } else {
      event.synchronize();  // an event of another backend: the host waits
    }
  }
  int64_t copied_bytes() const override { return copied_bytes_; }
  double busy_s() const override {
    harvest();
    return busy_s_;
  }
  double waited_s() const override {
    harvest();
    return waited_s_;
  }

 private:
  // Adds the times of the finished copies (throttle sleeps included, random delays not).
  void harvest() const {
    std::lock_guard<std::mutex> lock(mutex_);
    harvest_locked();
  }
  // ... and of the finished waits.
  void harvest_locked() const {
    for (auto [pairs, total] : {std::pair{&timings_, &busy_s_}, std::pair{&waits_, &waited_s_}})
      while (!pairs->empty() && cudaEventQuery(pairs->front().second) == cudaSuccess) {
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, pairs->front().first, pairs->front().second);
        *total += double(ms) * 1e-3;
        cudaEventDestroy(pairs->front().first);
        cudaEventDestroy(pairs->front().second);
        pairs->pop_front();
      }
  }

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

int64_t round_up(int64_t bytes) {
  return (bytes + kRawAlignBytes - 1) / kRawAlignBytes * kRawAlignBytes;
}

class CudaDeviceAllocator final : public RawAllocator {
 public:
  MemSpace space() const override { return MemSpace::kDevice; }
  void* allocate(int64_t bytes, const char* what) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, size_t(round_up(bytes)));
    if (e != cudaSuccess) {
      cudaGetLastError();                  // clear it
      if (e != cudaErrorMemoryAllocation)  // an earlier fault, not a lack of memory
        throw Error(str("CUDA: allocating ", what, ": ", cudaGetErrorString(e)));
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(str("out of GPU memory: ", what, " needs ", bytes, " bytes, ", free_b, " of ",
                      total_b, " free (", cudaGetErrorString(e), ")"));
    }
    return p;
  }
  void deallocate(void* p, int64_t) override { cudaFree(p); }
};

class CudaPinnedAllocator final : public RawAllocator {
 public:
  MemSpace space() const override { return MemSpace::kPinnedHost; }
  void* allocate(int64_t bytes, const char* what) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, size_t(round_up(bytes)), cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error(str("pinned host memory: ", what, " needs ", bytes, " bytes (",
                      cudaGetErrorString(e), ")"));
    }
    return p;
  }
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
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  class Timed {
   public:
    // An entry point called by another (a reduction's copy to the host) counts in its caller's.
    Timed(CudaBackend* b, const char* op)
        : b_(b->profile_ && b->timed_depth_ == 0 ? b : nullptr), op_(op) {
      if (!b_) return;
      b_->timed_depth_ = 1;
      host_start_ = std::chrono::steady_clock::now();
      start_ = b_->timing_event();
    }
    ~Timed() {
      if (!b_) return;
      b_->pending_.emplace_back(op_, start_, b_->timing_event());
      if (b_->pending_.size() >= 4096) b_->harvest_timings();
      b_->op_times_[op_].host_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_)
              .count();
      b_->timed_depth_ = 0;
    }
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
  void set_matmul_workspace(Tensor workspace) override {
    if (workspace.empty()) {
      workspace_ = nullptr;
      workspace_bytes_ = 0;
      return;
    }
    const auto start = reinterpret_cast<uintptr_t>(dev_bytes(workspace));
    const uintptr_t aligned = (start + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    MEMO_CHECK(
        workspace.contiguous() && int64_t(aligned - start) + kWorkspaceBytes <= workspace.bytes(),
        "cuda: a matrix-product workspace of ", workspace.bytes(), " bytes at ", start, " has no ",
        kWorkspaceBytes, " bytes from a ", kWorkspaceAlign, "-byte boundary");
    workspace_ = reinterpret_cast<void*>(aligned);
    workspace_bytes_ = kWorkspaceBytes;
  }
  bool has_values() const override { return true; }
  int64_t reproducible_rows() const override { return kCudaPanelRows; }
  DType activation_dtype() const override { return DType::kF32; }
  bool bf16_products() const override { return true; }
  // The chunked attention takes bf16 activations (Note [Chunked attention]); the per-query
  // kernels do not.
  bool bf16_attention() const override { return !rows_attention_; }
  // The layers' row and elementwise kernels take bf16 activations and weights (Note [bf16
  // bodies]).
  bool bf16_elementwise() const override { return true; }
  // The activations of one attention call share one dtype (f32, or bf16 where bf16_attention());
  // the log-sum-exp and the scratch are f32.
  void check_attention_dtypes(const char* op, std::initializer_list<ConstTensor> acts,
                              std::initializer_list<ConstTensor> f32s) const {
    const DType dt = acts.begin()->dtype();
    for (const ConstTensor& t : acts)
      MEMO_CHECK(t.dtype() == dt && (dt == DType::kF32 || (dt == DType::kBF16 && bf16_attention())),
                 op, ": activations of one dtype, f32", bf16_attention() ? " or bf16" : "",
                 "; got ", dtype_name(t.dtype()), " ", t.shape(), " beside ", dtype_name(dt));
    for (const ConstTensor& t : f32s)
      MEMO_CHECK(t.dtype() == DType::kF32, op, ": lse and scratch are f32, not ",
                 dtype_name(t.dtype()), " ", t.shape());
  }
  MemSpace device_space() const override { return MemSpace::kDevice; }
  RawAllocator& allocator(MemSpace space) override {
    return pick_allocator(space, {&host_, &pinned_, &device_}, "cuda");
  }
  bool host_can_access(MemSpace space) const override {
    return space == MemSpace::kHost || space == MemSpace::kPinnedHost;
  }
  int64_t device_free_bytes() override {
    size_t free = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return int64_t(free);
  }
  Stream& compute_stream() override { return *compute_; }
  cudaStream_t compute_handle() const { return compute_->handle(); }
  int device() const { return gpu_; }
  std::unique_ptr<Stream> make_copy_stream(std::string name,
                                           const StreamOptions& options) override {
    return std::make_unique<CudaStream>(std::move(name), options);
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    const Timed timed(this, "copy_to_host");
    check_cuda(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s()), "copy_to_host");
    check_cuda(cudaStreamSynchronize(s()), "copy_to_host");
  }
  void copy_from_host(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    const Timed timed(this, "copy_from_host");
    check_cuda(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s()), "copy_from_host");
    check_cuda(cudaStreamSynchronize(s()), "copy_from_host");
  }
  double measure_matmul_peak_flops(double seconds) override {
    return measure_peak(seconds, DType::kF32);
  }
  double measure_bf16_matmul_peak_flops(double seconds) override {
    return measure_peak(seconds, DType::kBF16);
  }
  double measure_peak(double seconds, DType operands);

  void matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
              float beta) override {
    const Timed timed(this, "matmul");
    check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
    matmul_unchecked(c, a, b, trans_a, trans_b, alpha, beta);
  }
  void matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) override {
    const Timed timed(this, "matmul_token_panels");
    check_matmul(c, a, b, false, true, 1.0f, beta);
    for (int64_t r = 0; r < c.rows(); r += kCudaPanelRows) {
      const int64_t e = std::min(c.rows(), r + kCudaPanelRows);
      matmul_unchecked(c.slice_rows(r, e), a.slice_rows(r, e), b, false, true, 1.0f, beta);
    }
  }
  void matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) override {
    const Timed timed(this, "matmul_token_panels_kn");
    check_matmul(c, a, b, false, false, 1.0f, beta);
    for (int64_t r = 0; r < c.rows(); r += kCudaPanelRows) {
      const int64_t e = std::min(c.rows(), r + kCudaPanelRows);
      matmul_unchecked(c.slice_rows(r, e), a.slice_rows(r, e), b, false, false, 1.0f, beta);
    }
  }

  void rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps) override {
    const Timed timed(this, "rmsnorm_forward");
    check_rmsnorm_forward(y, inv_rms, x, w, eps);
    const cuda::XMat Y = xmat(y), X = xmat(x);
    float* r = dev(inv_rms);
    const cuda::XVec wp = xvec(w);
    if (X.rows == 0) return;
    rmsnorm_forward_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(Y, r, X, wp, eps);
    check_cuda(cudaGetLastError(), "rmsnorm_forward launch");
  }
  void rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                        ConstTensor inv_rms) override {
    const Timed timed(this, "rmsnorm_backward");
    check_rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
    const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
    const cuda::XVec wp = xvec(w);
    const float* r = dev(inv_rms);
    float* dwp = dev(dw);
    if (X.rows == 0) return;
    rmsnorm_dx_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(DX, DY, X, wp, r);
    check_cuda(cudaGetLastError(), "rmsnorm_backward launch");
    launch(X.cols, [=] __device__(int64_t c) { cuda::rmsnorm_dw_col(dwp, DY, X, r, c); });
  }
  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                         ConstTensor b, float eps) override {
    const Timed timed(this, "layernorm_forward");
    check_layernorm_forward(y, mean, rstd, x, w, b, eps);
    const cuda::XMat Y = xmat(y), X = xmat(x);
    float *mp = dev(mean), *rp = dev(rstd);
    const cuda::XVec wp = xvec(w), bp = xvec(b);
    if (X.rows == 0) return;
    layernorm_forward_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(Y, mp, rp, X, wp, bp,
                                                                            eps);
    check_cuda(cudaGetLastError(), "layernorm_forward launch");
  }
  void layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                          ConstTensor w, ConstTensor mean, ConstTensor rstd) override {
    const Timed timed(this, "layernorm_backward");
    check_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
    const cuda::XVec wp = xvec(w);
    const float *mp = dev(mean), *rp = dev(rstd);
    float *dwp = dev(dw), *dbp = dev(db);
    if (X.rows == 0) return;
    layernorm_dx_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(DX, DY, X, wp, mp, rp);
    check_cuda(cudaGetLastError(), "layernorm_backward launch");
    launch(X.cols,
           [=] __device__(int64_t c) { cuda::layernorm_dwdb_col(dwp, dbp, DY, X, mp, rp, c); });
  }
  // The table is the CPU's (computed in double on the host), copied up.
  void rope_table(Tensor cos, Tensor sin, int64_t head_dim, float theta) override {
    const Timed timed(this, "rope_table");
    check_rope_table(cos, sin, head_dim, theta);
    MEMO_CHECK(cos.contiguous() && sin.contiguous(), "rope_table: non-contiguous tables");
    std::vector<float> c(size_t(cos.numel())), s(size_t(sin.numel()));
    cpu::rope_table(View<float>(c.data(), cos.shape()), View<float>(s.data(), sin.shape()),
                    head_dim, theta);
    copy_from_host(dev(cos), c.data(), cos.bytes());
    copy_from_host(dev(sin), s.data(), sin.bytes());
  }
  void rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                    int64_t first_row) override {
    const Timed timed(this, "rope_forward");
    check_rope_forward(x, cos, sin, head_dim, first_row);
    rotate(x, cos, sin, head_dim, first_row, 1.0f);
  }
  void rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                     int64_t first_row) override {
    const Timed timed(this, "rope_backward");
    check_rope_backward(dx, cos, sin, head_dim, first_row);
    rotate(dx, cos, sin, head_dim, first_row, -1.0f);
  }
  void swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) override {
    const Timed timed(this, "swiglu_forward");
    check_swiglu_forward(a, g, u);
    const cuda::XMat A = xmat(a), G = xmat(g), U = xmat(u);
    launch_rc(G.rows, G.cols, [=] __device__(int64_t t, int64_t f) {
      A.at(t, f) = cuda::swiglu(G.at(t, f), U.at(t, f));
    });
  }
  void swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                       ConstTensor u) override {
    const Timed timed(this, "swiglu_backward");
    check_swiglu_backward(dg, du, da, g, u);
    const cuda::XMat DG = xmat(dg), DU = xmat(du), DA = xmat(da), G = xmat(g), U = xmat(u);
    launch_rc(G.rows, G.cols, [=] __device__(int64_t t, int64_t f) {
      float dgv, duv;  // da, g, u read before either output is written (they may alias)
      cuda::swiglu_backward_elem(&dgv, &duv, DA.at(t, f), G.at(t, f), U.at(t, f));
      DG.at(t, f) = dgv;
      DU.at(t, f) = duv;
    });
  }
  void gelu_forward(Tensor y, ConstTensor x) override {
    const Timed timed(this, "gelu_forward");
    check_gelu_forward(y, x);
    const cuda::XMat Y = xmat(y), X = xmat(x);
    launch_rc(X.rows, X.cols,
              [=] __device__(int64_t t, int64_t c) { Y.at(t, c) = cuda::gelu(X.at(t, c)); });
  }
  void gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) override {
    const Timed timed(this, "gelu_backward");
    check_gelu_backward(dx, dy, x);
    const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
    launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) {
      DX.at(t, c) = cuda::gelu_backward(DY.at(t, c), X.at(t, c));
    });
  }
  void bias_add(Tensor y, ConstTensor b) override {
    const Timed timed(this, "bias_add");
    check_bias_add(y, b);
    const cuda::XMat Y = xmat(y);
    const cuda::XVec bp = xvec(b);
    launch_rc(Y.rows, Y.cols, [=] __device__(int64_t t, int64_t c) { Y.at(t, c) += bp[c]; });
  }
  void bias_backward(Tensor db, ConstTensor dy) override {
    const Timed timed(this, "bias_backward");
    check_bias_backward(db, dy);
    const cuda::XMat DY = xmat(dy);
    float* dbp = dev(db);
    launch(DY.cols, [=] __device__(int64_t c) { cuda::bias_backward_col(dbp, DY, c); });
  }
  void embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) override {
    const Timed timed(this, "embedding_forward");
    check_embedding_forward(x, tokens, wte, on_host(tokens.data()));
    const int32_t* ids = device_ids(tokens);
    const cuda::XMat X = xmat(x), W = xmat(wte);
    launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) {
      X.at(t, c) = cuda::embedding_forward_at(W, ids, t, c);
    });
  }
  void embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) override {
    const Timed timed(this, "embedding_backward");
    check_embedding_backward(dwte, dx, tokens, on_host(tokens.data()));
    const int32_t* ids = device_ids(tokens);
    const Mat DW = mat(dwte);
    const cuda::XMat DX = xmat(dx);
    launch(DX.cols, [=] __device__(int64_t c) { cuda::embedding_backward_col(DW, DX, ids, c); });
  }
  void cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits, View<const int32_t> targets,
                     float grad_scale) override {
    const Timed timed(this, "cross_entropy");
    check_cross_entropy(losses, dlogits, logits, targets, grad_scale, on_host(targets.data()));
    const int32_t* ys = device_ids(targets);
    const Mat DL = mat(dlogits);
    const CMat L = cmat(logits);
    float* lp = dev(losses);
    if (L.rows == 0) return;
    cross_entropy_kernel<<<unsigned(L.rows), cuda::kRowLanes, 0, s()>>>(lp, DL, L, ys, grad_scale);
    check_cuda(cudaGetLastError(), "cross_entropy launch");
  }
  void vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                               View<const int32_t> targets) override {
    const Timed timed(this, "vocab_parallel_ce_stats");
    check_vocab_parallel_ce_stats(stats, target_logit, logits, targets, on_host(targets.data()));
    const int32_t* ys = device_ids(targets);
    const CMat L = cmat(logits);
    float* sp = dev(stats);
    float* tp = dev(target_logit);
    launch(L.rows,
           [=] __device__(int64_t t) { cuda::vocab_parallel_ce_stats_row(sp, tp, L, ys, t); });
  }
  void vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                         View<const int32_t> targets, ConstTensor stats, ConstTensor target_logit,
                         float grad_scale) override {
    const Timed timed(this, "vocab_parallel_ce");
    check_vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit,
                            on_host(targets.data()));
    const int32_t* ys = device_ids(targets);
    const Mat DL = mat(dlogits);
    const CMat L = cmat(logits);
    const float* sp = dev(stats);
    const float* tp = dev(target_logit);
    const int64_t ranks = stats.rows() / 2;
    float* lp = dev(losses);
    launch(L.rows, [=] __device__(int64_t t) {
      cuda::vocab_parallel_ce_row(lp, DL, L, ys, sp, ranks, tp, grad_scale, t);
    });
  }
  // Note [Chunked attention] (cuda/chunked_attention.h); MEMO_CUDA_ATTENTION=rows: the
  // per-query kernels of cuda/bodies.h instead (the first version, kept for comparison).
  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override {
    if (rows_attention_) return 1;
    return cuda_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads, chunk_rows_);
  }
  void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                         int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                         AttnMask mask) override {
    const Timed timed(this, "attention_forward");
    const AttnDims d = check_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads);
    MEMO_CHECK(lse.contiguous(), "attention_forward: lse ", lse.shape(), " not contiguous");
    check_attention_dtypes("attention_forward", {o, q, k, v}, {lse, scratch});
    if (flash_applies(d, {o, q, k, v})) {
      cuda::FlashArgs f = flash_args(d, mask, q, k, v);
      f.o = bf16_ptr(o), f.ldo = o.ld(), f.lse = dev(lse);
      return flash_forward_launch(f, d.B);
    }
    if (!rows_attention_) {
      const cuda::ChunkShape c =
          cuda::chunk_shape(d.B, d.S, d.H, d.Hkv, d.D, mask == AttnMask::kCausal, chunk_rows_);
      check_scratch("attention_forward", scratch, cuda::chunked_forward_scratch_numel(c));
      ChunkOps ops{this, c};
      return cuda::chunked_attention_forward(ops, c, xmat(o), dev(lse), xmat(q), xmat(k), xmat(v),
                                             dev(scratch));
    }
    const cuda::AttnShape a{d.S, d.H, d.G, d.D, mask == AttnMask::kCausal};
    const Mat O = mat(o);
    const CMat Q = cmat(q), K = cmat(k), V = cmat(v);
    float* lp = dev(lse);
#define MEMO_CALL(kD, kExact) attention_forward_launch<kD, kExact>(O, lp, Q, K, V, a, d.B)
    MEMO_HEAD_DIM_DISPATCH(d.D, "attention_forward", MEMO_CALL)
#undef MEMO_CALL
  }
  int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                               int64_t n_kv_heads) override {
    if (attention_kind_ != AttentionKind::kFlash)
      return attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
    return cuda_bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                int64_t n_kv_heads) override {
    if (attention_kind_ != AttentionKind::kFlash)
      return attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
    return cuda_bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override {
    if (rows_attention_) return seq * n_heads;  // delta of one sequence
    return cuda_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads, chunk_rows_);
  }
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                          ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                          int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                          AttnMask mask) override {
    const Timed timed(this, "attention_backward");
    const AttnDims d =
        check_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads, n_kv_heads);
    MEMO_CHECK(lse.contiguous(), "attention_backward: lse ", lse.shape(), " not contiguous");
    check_attention_dtypes("attention_backward", {dq, dk, dv, dout, q, k, v, o}, {lse, scratch});
    if (flash_applies(d, {dq, dk, dv, dout, q, k, v, o})) {
      check_scratch("attention_backward", scratch, d.S * d.H);  // delta of one sequence
      cuda::FlashArgs f = flash_args(d, mask, q, k, v);
      f.o_in = bf16_ptr(o), f.ldo = o.ld(), f.dout = bf16_ptr(dout), f.lddo = dout.ld();
      f.dq = bf16_ptr(dq), f.lddq = dq.ld(), f.dk = bf16_ptr(dk), f.lddk = dk.ld();
      f.dv = bf16_ptr(dv), f.lddv = dv.ld(), f.lse = const_cast<float*>(dev(lse));
      return flash_backward_launch(f, d.B, dev(scratch), xmat(dout), xmat(o));
    }
    if (!rows_attention_) {
      const cuda::ChunkShape c =
          cuda::chunk_shape(d.B, d.S, d.H, d.Hkv, d.D, mask == AttnMask::kCausal, chunk_rows_);
      check_scratch("attention_backward", scratch, cuda::chunked_backward_scratch_numel(c));
      ChunkOps ops{this, c};
      return cuda::chunked_attention_backward(ops, c, xmat(dq), xmat(dk), xmat(dv), xmat(dout),
                                              xmat(q), xmat(k), xmat(v), xmat(o), dev(lse),
                                              dev(scratch));
    }
    check_scratch("attention_backward", scratch, d.S * d.H);
    const cuda::AttnShape a{d.S, d.H, d.G, d.D, mask == AttnMask::kCausal};
    const Mat DQ = mat(dq), DK = mat(dk), DV = mat(dv);
    const CMat DO = cmat(dout), Q = cmat(q), K = cmat(k), V = cmat(v), O = cmat(o);
    const float* lp = dev(lse);
    float* delta = dev(scratch);
    for (int64_t b = 0; b < d.B; ++b) {
      attention_delta_launch(delta, DO, O, a, b);
#define MEMO_CALL(kD, kExact) \
  attention_grad_launch<kD, kExact>(DQ, DK, DV, DO, Q, K, V, lp, delta, a, b, d.Hkv)
      MEMO_HEAD_DIM_DISPATCH(d.D, "attention_backward", MEMO_CALL)
#undef MEMO_CALL
    }
  }
  void attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) override {
    const Timed timed(this, "attention_merge");
    check_attention_merge(o, lse, o_part, lse_part);
    const int64_t H = lse.dim(1), S = lse.dim(2), D = o.cols() / H;
    const Mat O = mat(o);
    const CMat P = cmat(o_part);
    float* lp = dev(lse);
    const float* lpp = dev(lse_part);
    launch(O.rows * H, [=] __device__(int64_t i) {
      cuda::attention_merge_item(O, lp, P, lpp, H, S, D, i / H, i % H);
    });
  }
  int64_t attention_decode_scratch_numel(int64_t keys) override { return 1; }
  void attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch) override {
    const Timed timed(this, "attention_decode");
    check_attention_decode(o, q, k, v, first, n_heads, n_kv_heads);
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

  void copy(Tensor dst, ConstTensor src) override {
    const Timed timed(this, "copy");
    check_copy(dst, src);
    MEMO_CHECK(dst.dtype() == src.dtype(), "copy: ", dtype_name(src.dtype()), " to ",
               dtype_name(dst.dtype()), " is a convert");
    if (dst.numel() == 0) return;
    if (dst.contiguous() && src.contiguous()) {  // any two shapes of one element count
      check_cuda(cudaMemcpyAsync(dev_operand(dst), dev_operand(src), size_t(dst.bytes()),
                                 cudaMemcpyDefault, s()),
                 "copy");
      return;
    }
    MEMO_CHECK(same_shape(dst, src), "copy: strided views of different shapes ", dst.shape(),
               " and ", src.shape());
    const cuda::XMat D = xmat(dst), S = xmat(src);  // the bits: a row copy of the element size
    const size_t e = size_t(dtype_bytes(dst.dtype()));
    check_cuda(cudaMemcpy2DAsync(D.p, size_t(D.ld) * e, S.p, size_t(S.ld) * e, size_t(D.cols) * e,
                                 size_t(D.rows), cudaMemcpyDefault, s()),
               "copy");
  }
  void convert(Tensor dst, ConstTensor src) override {
    const Timed timed(this, "convert");
    check_convert(dst, src);
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
  void launch_convert_to_bf16(uint16_t* d, const float* x, int64_t n) {
    launch(n, [=] __device__(int64_t i) { d[i] = cuda::to_bf16_bits(x[i]); });
  }
  void launch_convert_from_bf16(float* d, const uint16_t* x, int64_t n) {
    launch(n, [=] __device__(int64_t i) { d[i] = cuda::from_bf16_bits(x[i]); });
  }
  void fill(Tensor dst, float value) override {
    const Timed timed(this, "fill");
    check_fill(dst, value);
    const cuda::XMat D = xmat(dst);
    launch_rc(D.rows, D.cols, [=] __device__(int64_t t, int64_t c) { D.at(t, c) = value; });
  }
  void scale(Tensor x, float factor) override {
    const Timed timed(this, "scale");
    check_scale(x, factor);
    const cuda::XMat X = xmat(x);
    launch_rc(X.rows, X.cols,
              [=] __device__(int64_t t, int64_t c) { X.at(t, c) = float(X.at(t, c)) * factor; });
  }
  void add_into(Tensor dst, ConstTensor src) override {
    const Timed timed(this, "add_into");
    check_add_into(dst, src);
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
  double sum(ConstTensor x) override {
    const Timed timed(this, "sum");
    check_sum(x);
    return ordered_sum(cmat(x), false);
  }
  double sum_squares(ConstTensor x) override {
    const Timed timed(this, "sum_squares");
    check_sum_squares(x);
    return ordered_sum(cmat(x), true);
  }
  int64_t noise_probe_partial_numel(int64_t n) override {
    return cuda_noise_probe_partial_numel(n);
  }
  double noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                          View<double> partial) override {
    const Timed timed(this, "noise_probe_pass");
    check_optimizer_update("noise_probe_pass", g, g, {sum});
    const int64_t n = g.numel(), chunks = noise_probe_partial_numel(n);
    MEMO_CHECK(partial.numel() >= chunks, "noise_probe_pass: ", partial.numel(),
               " partial sums for ", chunks, " chunks");
    double* sums = device_doubles(chunks);
    float *gp = dev(g), *sp = dev(sum);
    const int p = pass == NoiseProbePass::kFirst ? 0 : pass == NoiseProbePass::kMiddle ? 1 : 2;
    launch(chunks,
           [=] __device__(int64_t k) { sums[k] = cuda::noise_probe_chunk(gp, sp, p, n, k); });
    return host_ordered_sum(sums, chunks);  // `partial` goes unused: the sums stay in `sums`
  }

  void sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& st) override {
    const Timed timed(this, "sgd_update");
    check_optimizer_update("sgd_update", p, g, {buf});
    float *pp = dev(p), *bp = dev(buf);
    const float* gp = dev(g);
    launch(p.numel(), [=] __device__(int64_t j) { cuda::sgd_elem(pp, bp, gp, st, j); });
  }
  void signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& st) override {
    const Timed timed(this, "signsgd_update");
    check_optimizer_update("signsgd_update", p, g, {m});
    float *pp = dev(p), *mp = dev(m);
    const float* gp = dev(g);
    launch(p.numel(), [=] __device__(int64_t j) { cuda::signsgd_elem(pp, mp, gp, st, j); });
  }
  void adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) override {
    const Timed timed(this, "adam_update");
    check_optimizer_update("adam_update", p, g, {m, v});
    adam(p, m, v, g, st, false);
  }
  void adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) override {
    const Timed timed(this, "adamw_update");
    check_optimizer_update("adamw_update", p, g, {m, v});
    adam(p, m, v, g, st, true);
  }
  void adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& st) override {
    const Timed timed(this, "adagrad_update");
    check_optimizer_update("adagrad_update", p, g, {sum});
    float *pp = dev(p), *sp = dev(sum);
    const float* gp = dev(g);
    launch(p.numel(), [=] __device__(int64_t j) { cuda::adagrad_elem(pp, sp, gp, st, j); });
  }
  void rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                      const RmspropStep& st) override {
    const Timed timed(this, "rmsprop_update");
    check_optimizer_update("rmsprop_update", p, g, {square_avg, grad_avg, buf});
    float *pp = dev(p), *sq = dev(square_avg), *ga = dev(grad_avg), *bp = dev(buf);
    const float* gp = dev(g);
    launch(p.numel(), [=] __device__(int64_t j) { cuda::rmsprop_elem(pp, sq, ga, bp, gp, st, j); });
  }
  void lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& st) override {
    const Timed timed(this, "lion_update");
    check_optimizer_update("lion_update", p, g, {m});
    float *pp = dev(p), *mp = dev(m);
    const float* gp = dev(g);
    launch(p.numel(), [=] __device__(int64_t j) { cuda::lion_elem(pp, mp, gp, st, j); });
  }
  // Adafactor's scratch, in device memory: R or one per 1,024-element chunk, and a slot for the
  // mean of the row means.
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override {
    return cuda_adafactor_partial_numel(rows, numel);
  }
  double adafactor_rms(ConstTensor x, View<double> partial) override {
    const Timed timed(this, "adafactor_rms");
    MEMO_CHECK(x.contiguous(), "adafactor_rms: x ", x.shape(), " not contiguous");
    return std::sqrt(ordered_sum(cmat(x), true) / double(std::max<int64_t>(1, x.numel())));
  }
  void adafactor_update_matrix(Tensor p, Tensor m, Tensor row_t, Tensor col_t, ConstTensor g,
                               Tensor row_inv, Tensor col_inv, View<double> partial,
                               const AdafactorStep& st) override {
    const Timed timed(this, "adafactor_update_matrix");
    check_optimizer_update("adafactor_update_matrix", p, g, {m});
    const int64_t R = p.rows(), C = p.cols();
    MEMO_CHECK(p.ndim() == 2 && row_t.numel() == R && col_t.numel() == C && row_inv.numel() >= R &&
                   col_inv.numel() >= C && partial.numel() >= R + 1,
               "adafactor_update_matrix: p ", p.shape(), " row ", row_t.shape(), " col ",
               col_t.shape(), " scratch ", row_inv.shape(), " ", col_inv.shape(), " ",
               partial.shape());
    float *row = dev(row_t), *col = dev(col_t), *ri = dev(row_inv), *ci = dev(col_inv);
    const float* gp = dev(g);
    double* pd = partial.data();
    const float b = st.beta2t, eps1 = st.eps1;
    launch(R, [=] __device__(int64_t r) { cuda::adafactor_row(row, gp, C, b, eps1, r); });
    launch(C, [=] __device__(int64_t c) { cuda::adafactor_col(col, gp, R, C, b, eps1, c); });
    launch(1, [=] __device__(int64_t) { pd[R] = cuda::adafactor_row_mean(row, R); });
    launch(R, [=] __device__(int64_t r) { ri[r] = cuda::adafactor_inv_row(row[r], pd[R]); });
    launch(C, [=] __device__(int64_t c) { ci[c] = cuda::adafactor_inv_col(col[c]); });
    launch(R, [=] __device__(int64_t r) { pd[r] = cuda::adafactor_u_row_sq(gp, ri, ci, C, r); });
    const double rms_u = std::sqrt(host_ordered_sum(pd, R) / double(R * C));
    const float scale = float(st.alpha / std::max(1.0, rms_u / st.clip_threshold));
    float *pp = dev(p), *mp = dev(m);
    const float b1 = st.beta1, keep = st.keep;
    launch(R * C, [=] __device__(int64_t j) {
      const int64_t r = j / C, c = j % C;
      cuda::adafactor_apply(pp, mp, scale * (gp[j] * ri[r] * ci[c]), b1, keep, j);
    });
  }
  void adafactor_update_vector(Tensor p, Tensor m, Tensor v_t, ConstTensor g, View<double> partial,
                               const AdafactorStep& st) override {
    const Timed timed(this, "adafactor_update_vector");
    check_optimizer_update("adafactor_update_vector", p, g, {m, v_t});
    const int64_t n = p.numel();
    const int64_t chunks = (n + cuda::kAdafactorChunk - 1) / cuda::kAdafactorChunk;
    MEMO_CHECK(partial.numel() >= chunks, "adafactor_update_vector: ", partial.numel(),
               " partial sums for ", n, " elements");
    float* v = dev(v_t);
    const float* gp = dev(g);
    double* pd = partial.data();
    const float b = st.beta2t, eps1 = st.eps1;
    launch(n, [=] __device__(int64_t j) { cuda::adafactor_v(v, gp, b, eps1, j); });
    launch(chunks, [=] __device__(int64_t k) { pd[k] = cuda::adafactor_v_chunk_sq(gp, v, n, k); });
    const double rms_u = std::sqrt(host_ordered_sum(pd, chunks) / double(n));
    const float scale = float(st.alpha / std::max(1.0, rms_u / st.clip_threshold));
    float *pp = dev(p), *mp = dev(m);
    const float b1 = st.beta1, keep = st.keep;
    launch(n, [=] __device__(int64_t j) {
      cuda::adafactor_apply(pp, mp, scale * (gp[j] / ::sqrtf(v[j])), b1, keep, j);
    });
  }

 private:
  cudaStream_t s() const { return compute_->handle(); }

  template <class F>
  void launch(int64_t n, F f) {
    if (n <= 0) return;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20);
    for_each_kernel<<<unsigned(blocks), kThreads, 0, s()>>>(n, f);
    check_cuda(cudaGetLastError(), "kernel launch");
  }
  // f(t, c) for every element of a rows x cols matrix.
  template <class F>
  void launch_rc(int64_t rows, int64_t cols, F f) {
    launch(rows * cols, RowCol<F>{cols, f});
  }
  // How the forward and backward attention kernels are instantiated for head_dim D: -D where D is
  // 32, 64 or 128 (exact: unrolled, register arrays), else the bound 64, 128 or 256.
  static int head_dim_kind(int64_t D, const char* op) {
    if (D == 32 || D == 64 || D == 128) return -int(D);
    return max_head_dim(D, op);
  }
  // The bound on head_dim the attention kernels are instantiated for (their per-thread arrays).
  static int max_head_dim(int64_t D, const char* op) {
    if (D <= 64) return 64;
    if (D <= 128) return 128;
    if (D <= 256) return 256;
    throw ConfigError(str(op, ": head_dim ", D, " is over the CUDA kernels' 256"));
  }

  // nvcc allows a __device__ lambda only in a public member function (the extended-lambda rules):
  // every function below that defines one is public.
 public:
  // Note [Flash attention]: bf16 activations, head dim 32, 64 or 128, every matrix 4-byte aligned
  // with even row strides (the kernels move bf16 pairs), unless MEMO_CUDA_ATTENTION says otherwise.
  // The scratch was sized for them (bf16_attention_*_scratch_numel), so a tensor they cannot take
  // is an error, not a fallback.
  bool flash_applies(const AttnDims& d, std::initializer_list<ConstTensor> ts) const {
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
  static uint16_t* bf16_ptr(ConstTensor t) { return static_cast<uint16_t*>(dev_operand(t)); }
  static cuda::FlashArgs flash_args(const AttnDims& d, AttnMask mask, ConstTensor q, ConstTensor k,
                                    ConstTensor v) {
    cuda::FlashArgs f;
    f.S = d.S, f.H = d.H, f.G = d.G, f.D = d.D, f.causal = mask == AttnMask::kCausal;
    f.scale = 1.0f / std::sqrt(float(d.D));
    f.q = bf16_ptr(q), f.ldq = q.ld(), f.k = bf16_ptr(k), f.ldk = k.ld();
    f.v = bf16_ptr(v), f.ldv = v.ld();
    return f;
  }
  // Each instantiation's shared memory above the default 48 KiB, asked for once a process (memo
  // drives one GPU a process; a failed request is asked again).
  template <class K>
  static void flash_smem(K kernel, int bytes) {
    static const bool done = [&] {
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                 "flash attention shared memory");
      return true;
    }();
    (void)done;
  }
  template <int kD>
  void flash_forward_launch_d(const cuda::FlashArgs& f, int64_t B) {
    constexpr int bytes = cuda::flash_forward_smem(kD);
    flash_smem(flash_forward_kernel<kD>, bytes);
    const int64_t tiles = (f.S + cuda::kFlashRows - 1) / cuda::kFlashRows;
    if (tiles == 0 || B == 0) return;
    flash_forward_kernel<kD>
        <<<dim3(unsigned(tiles), unsigned(f.H), unsigned(B)), cuda::kFlashThreads, bytes, s()>>>(
            f, tiles);
    check_cuda(cudaGetLastError(), "flash attention forward launch");
  }
  void flash_forward_launch(const cuda::FlashArgs& f, int64_t B) {
    if (f.D == 32) return flash_forward_launch_d<32>(f, B);
    if (f.D == 64) return flash_forward_launch_d<64>(f, B);
    return flash_forward_launch_d<128>(f, B);
  }
  template <int kD>
  void flash_backward_launch_d(const cuda::FlashArgs& f, int64_t b, int64_t tiles) {
    constexpr int bytes = cuda::flash_backward_smem(kD);
    flash_smem(flash_dq_kernel<kD>, bytes);
    flash_smem(flash_dkdv_kernel<kD>, bytes);
    flash_dq_kernel<kD>
        <<<dim3(unsigned(tiles), unsigned(f.H)), cuda::kFlashThreads, bytes, s()>>>(f, b, tiles);
    check_cuda(cudaGetLastError(), "flash attention dq launch");
    flash_dkdv_kernel<kD>
        <<<dim3(unsigned(tiles), unsigned(f.H / f.G)), cuda::kFlashThreads, bytes, s()>>>(f, b);
    check_cuda(cudaGetLastError(), "flash attention dk/dv launch");
  }
  void flash_backward_launch(cuda::FlashArgs f, int64_t B, float* delta, cuda::XMat dout,
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
  template <int kMaxD, bool kExact>
  void attention_forward_launch(Mat O, float* lp, CMat Q, CMat K, CMat V, cuda::AttnShape a,
                                int64_t B) {
    const int64_t H = a.H, S = a.S;
    launch(B * H * S, [=] __device__(int64_t i) {
      cuda::attention_forward_row<kMaxD, kExact>(O, lp, Q, K, V, a, i / (H * S), (i / S) % H,
                                                 i % S);
    });
  }
  // The operations of the chunked schedule (Note [Chunked attention]) on the compute stream.
  struct ChunkOps {
    CudaBackend* be;
    cuda::ChunkShape c;
    void gemm(const cuda::RowGemm& g) { be->row_gemm(g); }
    void softmax(const cuda::ScoreRows& sc, float* lse_b) {
      if (sc.n == 0) return;
      chunk_softmax_kernel<<<unsigned(c.H * sc.n), cuda::kSoftmaxLanes, 0, be->s()>>>(sc, lse_b,
                                                                                      c.S);
      check_cuda(cudaGetLastError(), "chunk softmax launch");
    }
    void zero(cuda::XMat x) {
      be->zero_launch(Mat{static_cast<float*>(x.p), x.rows, x.cols, x.ld});
    }
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
  void row_gemm(const cuda::RowGemm& g) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    gemm(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m,
         g.k, g.alpha, g.b, g.ldb, g.a, g.lda, g.beta, g.c, g.ldc,
         g.ab_bf16 ? CUDA_R_16BF : CUDA_R_32F, g.c_bf16 ? CUDA_R_16BF : CUDA_R_32F, g.batch,
         g.stride_b, g.stride_a, g.stride_c);
  }
  void zero_launch(Mat X) {
    launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) { X.at(t, c) = 0.0f; });
  }
  void chunk_delta_launch(float* delta, cuda::XMat dout, cuda::XMat o, int64_t H, int64_t S,
                          int64_t D, int64_t b) {
    launch(H * S, [=] __device__(int64_t i) {
      cuda::chunk_delta_item(delta, dout, o, S, D, b, i / S, i % S);
    });
  }
  void grad_scores_launch(cuda::ScoreRows sc, float* dp, uint16_t* ds16, const float* lse_b,
                          const float* delta, int64_t H, int64_t S) {
    if (sc.n == 0) return;
    chunk_grad_scores_kernel<<<unsigned(H * sc.n), kThreads, 0, s()>>>(sc, dp, ds16, lse_b, delta,
                                                                       S);
    check_cuda(cudaGetLastError(), "chunk grad scores launch");
  }
  void round_rows_launch(cuda::XMat dst, cuda::XMat src) {
    launch_rc(dst.rows, dst.cols, [=] __device__(int64_t t, int64_t c) {
      dst.at(t, c) = float(src.at(t, c));  // dst bf16: rounded once
    });
  }
  void attention_delta_launch(float* delta, CMat DO, CMat O, cuda::AttnShape a, int64_t b) {
    const int64_t S = a.S;
    launch(a.H * S, [=] __device__(int64_t i) {
      cuda::attention_delta_row(delta, DO, O, a, b, i / S, i % S);
    });
  }
  template <int kMaxD, bool kExact>
  void attention_grad_launch(Mat DQ, Mat DK, Mat DV, CMat DO, CMat Q, CMat K, CMat V,
                             const float* lp, const float* delta, cuda::AttnShape a, int64_t b,
                             int64_t Hkv) {
    const int64_t S = a.S;
    launch(a.H * S, [=] __device__(int64_t i) {
      cuda::attention_dq_row<kMaxD, kExact>(DQ, DO, Q, K, V, lp, delta, a, b, i / S, i % S);
    });
    launch(Hkv * S, [=] __device__(int64_t i) {
      cuda::attention_dkdv_row<kMaxD, kExact>(DK, DV, DO, Q, K, V, lp, delta, a, b, i / S, i % S);
    });
  }
  template <int kMaxD>
  void attention_decode_launch(Mat O, CMat Q, CMat K, CMat V, int64_t first, int64_t G, int64_t D,
                               int64_t H) {
    launch(Q.rows * H, [=] __device__(int64_t i) {
      cuda::attention_decode_item<kMaxD>(O, Q, K, V, first, G, D, i / H, i % H);
    });
  }
  void rotate(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim, int64_t first_row,
              float sign) {
    const cuda::XMat X = xmat(x);
    const CMat CO = cmat(cos), SI = cmat(sin);
    const int64_t half = head_dim / 2, per_row = X.cols / head_dim * half;
    launch(X.rows * per_row, [=] __device__(int64_t i) {
      const int64_t t = i / per_row, r = i % per_row;
      cuda::rope_rotate_pair(X, CO, SI, head_dim, first_row, sign, t, r / half, r % half);
    });
  }
  void adam(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st, bool decoupled) {
    float *pp = dev(p), *mp = dev(m), *vp = dev(v);
    const float* gp = dev(g);
    launch(p.numel(),
           [=] __device__(int64_t j) { cuda::adam_elem(pp, mp, vp, gp, st, decoupled, j); });
  }
  // n doubles of device memory, copied to the host and added in index order.
  double host_ordered_sum(const double* device, int64_t n) {
    host_doubles_.resize(size_t(n));
    copy_to_host(host_doubles_.data(), device, n * int64_t(sizeof(double)));
    double total = 0.0;
    for (double v : host_doubles_) total += v;
    return total;
  }
  // Chunk sums on the device, added in chunk order on the host.
  double ordered_sum(CMat x, bool squares) {
    const int64_t n = x.rows * x.cols, chunks = (n + cuda::kSumChunk - 1) / cuda::kSumChunk;
    if (chunks == 0) return 0.0;
    double* dev = device_doubles(chunks);
    launch(chunks, [=] __device__(int64_t k) { dev[k] = cuda::chunk_sum(x, squares, k); });
    return host_ordered_sum(dev, chunks);
  }
  // Device scratch the backend owns, grown on demand (growing frees the old block: cudaFree waits
  // for the work that may still read it).
  double* device_doubles(int64_t n) {
    if (doubles_.bytes() < n * int64_t(sizeof(double)))
      doubles_ = RawBuffer(device_, n * int64_t(sizeof(double)), "cuda reduction partials");
    return doubles_.as<double>();
  }
  // What memory p is in: ordinary host (cudaMemoryTypeUnregistered), pinned host or device.
  static cudaMemoryType memory_type(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return cudaMemoryTypeUnregistered;
    }
    return a.type;
  }
  // Whether the host can read p (ordinary or pinned host memory, not device memory).
  static bool on_host(const void* p) {
    const cudaMemoryType t = memory_type(p);
    return t == cudaMemoryTypeUnregistered || t == cudaMemoryTypeHost;
  }
  // Token ids in device memory (the model copies them there) are used in place; ids in host memory
  // (a caller of the kernel alone) are copied up on the compute stream first, a later copy being
  // ordered after the kernel that reads them.
  const int32_t* device_ids(View<const int32_t> ids) {
    MEMO_CHECK(ids.contiguous(), "cuda: token ids not contiguous");
    if (!on_host(ids.data())) return ids.data();
    const int64_t bytes = ids.numel() * int64_t(sizeof(int32_t));
    if (ids_.bytes() < bytes) ids_ = RawBuffer(device_, bytes, "cuda token ids");
    if (bytes > 0)
      check_cuda(
          cudaMemcpyAsync(ids_.data(), ids.data(), size_t(bytes), cudaMemcpyHostToDevice, s()),
          "token ids");
    return ids_.as<const int32_t>();
  }

  void matmul_unchecked(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                        float alpha, float beta);
  // A and B of type ab (f32 or bf16), C of type ct; f32 accumulation and scalars. batch > 1: a
  // strided batch, the i-th product's X at X + i stride_x elements.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
            void* C, int64_t ldc, cudaDataType_t ab, cudaDataType_t ct, int64_t batch = 1,
            int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0);

 private:
  // Timing events never throw: they run in destructors; a failed one is simply not counted.
  cudaEvent_t timing_event() {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) == cudaSuccess) cudaEventRecord(e, s());
    return e;
  }
  void harvest_timings() {
    cudaStreamSynchronize(s());
    for (auto& [op, start, end] : pending_) {
      float ms = 0.0f;
      if (start && end && cudaEventElapsedTime(&ms, start, end) == cudaSuccess) {
        op_times_[op].calls += 1;
        op_times_[op].ms += double(ms);
      }
      if (start) cudaEventDestroy(start);
      if (end) cudaEventDestroy(end);
    }
    pending_.clear();
  }
  void print_profile() {
    harvest_timings();
    std::vector<std::pair<std::string, OpTime>> rows(op_times_.begin(), op_times_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0.0, host = 0.0;
    for (const auto& r : rows) total += r.second.ms, host += r.second.host_ms;
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - created_)
            .count();
    std::fprintf(stderr,
                 "memo cuda profile: %.1f ms of GPU time in the backend's kernel entry points, "
                 "%.1f ms of host time inside them, %.1f ms of wall time since the backend "
                 "started (%.1f ms of it host work outside the backend)\n",
                 total, host, wall, wall - host);
    std::fprintf(stderr, "  %-28s %9s %11s %7s %11s\n", "entry point", "calls", "GPU ms", "GPU %",
                 "host ms");
    for (const auto& [op, t] : rows)
      std::fprintf(stderr, "  %-28s %9lld %11.2f %6.2f%% %11.2f\n", op.c_str(),
                   static_cast<long long>(t.calls), t.ms, total > 0.0 ? 100.0 * t.ms / total : 0.0,
                   t.host_ms);
  }

  struct OpTime {
    int64_t calls = 0;
    double ms = 0.0;       // GPU time between the entry point's two events
    double host_ms = 0.0;  // the host's wall time inside the entry point
  };
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  bool profile_ = false;
  int timed_depth_ = 0;  // 1 inside a profiled entry point
  std::map<std::string, OpTime> op_times_;
  std::vector<std::tuple<const char*, cudaEvent_t, cudaEvent_t>> pending_;

  struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  HostAllocator host_{MemSpace::kHost};
  CudaPinnedAllocator pinned_;
  CudaDeviceAllocator device_;
  std::unique_ptr<CudaStream> compute_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;  // the caller's (Note [Matrix-product workspace]); null: none
  int64_t workspace_bytes_ = 0;
  RawBuffer doubles_, ids_;
  std::vector<double> host_doubles_;
  // (transposes, m, n, k, leading dimensions, alignment, workspace bytes, operand and result
  // types, batch and its strides) -> algorithm
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int64_t,
                      int, int, int64_t, int64_t, int64_t, int64_t>,
           Gemm>
      gemms_;
  bool rows_attention_ = false;  // MEMO_CUDA_ATTENTION=rows
 public:
  int64_t chunk_rows_ = 0;  // set_cuda_attention_chunk_rows (tests); 0: the budget's
  // MEMO_CUDA_ATTENTION: flash (the default; bf16 only, Note [Flash attention]), chunked, rows;
  // set_cuda_flash_attention (tests)
  enum class AttentionKind { kFlash, kChunked, kRows };
  AttentionKind attention_kind_ = AttentionKind::kFlash;

 private:
  std::string description_;
  std::string device_name_;  // cudaDeviceProp::name
  int gpu_ = 0;              // the device index
};


CudaBackend::CudaBackend(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw ConfigError(str("--device cuda: GPU ", device, " does not exist (", count, " found)"));
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  gpu_ = device;
  const char* profile = std::getenv("MEMO_CUDA_PROFILE");
  profile_ = profile && *profile && std::strcmp(profile, "0") != 0;
  const char* attention = std::getenv("MEMO_CUDA_ATTENTION");
  rows_attention_ = attention && std::strcmp(attention, "rows") == 0;
  if (attention && *attention && !rows_attention_ && std::strcmp(attention, "chunked") != 0 &&
      std::strcmp(attention, "flash") != 0)
    throw ConfigError(str("MEMO_CUDA_ATTENTION=", attention,
                          ": 'flash' (the default: bf16 activations, head dims 32, 64 and 128; the "
                          "chunked schedule otherwise), 'chunked' or 'rows'"));
  if (rows_attention_)
    attention_kind_ = AttentionKind::kRows;
  else if (attention && std::strcmp(attention, "chunked") == 0)
    attention_kind_ = AttentionKind::kChunked;
  compute_ = std::make_unique<CudaStream>("compute", StreamOptions{});
  check_lt(lt().cublasLtCreate(&lt_), "cublasLtCreate");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  device_name_ = prop.name;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  description_ = str(
      "cuda, fp32, ", prop.name, " (sm_", prop.major, prop.minor, ", ", prop.multiProcessorCount,
      " SMs, ", double(prop.totalGlobalMem) / double(int64_t(1) << 30), " GiB), CUDA runtime ",
      runtime / 1000, ".", runtime % 1000 / 10, ", cuBLASLt ", lt().cublasLtGetVersion());
}

CudaBackend::~CudaBackend() {
  if (profile_) print_profile();
  cudaStreamSynchronize(s());
  for (auto& [key, g] : gemms_) {
    lt().cublasLtMatrixLayoutDestroy(g.a);
    lt().cublasLtMatrixLayoutDestroy(g.b);
    lt().cublasLtMatrixLayoutDestroy(g.c);
    lt().cublasLtMatmulDescDestroy(g.desc);
  }
  doubles_.reset();
  ids_.reset();
  if (lt_) lt().cublasLtDestroy(lt_);
}

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

}  // namespace

int64_t cublaslt_version() { return int64_t(lt().cublasLtGetVersion()); }

int cuda_device_count() {
  int count = 0;  // left unwritten without a driver (DESIGN.md section 7)
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw ConfigError(str("--device cuda: no CUDA GPU can be used here (",
                          e != cudaSuccess ? cudaGetErrorString(e) : "no device found", ")"));
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

int cuda_device(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? cuda->device() : -1;
}

void set_cuda_attention_chunk_rows(Backend& backend, int64_t rows) {
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) cuda->chunk_rows_ = rows;
}

void set_cuda_flash_attention(Backend& backend, bool on) {
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend))
    cuda->attention_kind_ =
        on ? CudaBackend::AttentionKind::kFlash : CudaBackend::AttentionKind::kChunked;
}

void* cuda_compute_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? static_cast<void*>(cuda->compute_handle()) : nullptr;
}

}  // namespace memo
