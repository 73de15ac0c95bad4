// The CUDA backend's events, streams and allocators (backend_impl.cuh): a copy stream orders its
// copies after its waits with no host block; the allocators are cudaMalloc and cudaHostAlloc.
#include <chrono>
#include <thread>

#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

void sleep_host_fn(void* seconds) {
  const double s = *static_cast<double*>(seconds);
  delete static_cast<double*>(seconds);
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

int64_t round_up(int64_t bytes) {
  return (bytes + kRawAlignBytes - 1) / kRawAlignBytes * kRawAlignBytes;
}

}  // namespace

CudaEvent::CudaEvent(cudaStream_t stream) {
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord");
}
CudaEvent::~CudaEvent() { cudaEventDestroy(event_); }
bool CudaEvent::done() const {
  const cudaError_t r = cudaEventQuery(event_);
  if (r == cudaErrorNotReady) return false;
  check_cuda(r, "cudaEventQuery");
  return true;
}
void CudaEvent::synchronize() const {
  check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

CudaStream::CudaStream(std::string name, const StreamOptions& options)
    : name_(std::move(name)), options_(options), rng_(options.random_delay_seed) {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}
CudaStream::~CudaStream() {
  cudaStreamSynchronize(stream_);
  harvest();
  for (auto& [start, end] : timings_) cudaEventDestroy(start), cudaEventDestroy(end);
  for (auto& [start, end] : waits_) cudaEventDestroy(start), cudaEventDestroy(end);
  cudaStreamDestroy(stream_);
}

// A delay (the test's random one, or the throttle's n / bandwidth) runs as a host function
// queued before the copy: later work on this stream waits for it, the calling thread does not
// (CUDA may run the host functions of different streams one at a time).
void CudaStream::copy(void* dst, const void* src, int64_t bytes) {
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

// A wait between two timing events of this stream: the time between them is the time the
// stream stood still (waited_s).
void CudaStream::wait(const Event& event) {
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

double CudaStream::busy_s() const {
  harvest();
  return busy_s_;
}
double CudaStream::waited_s() const {
  harvest();
  return waited_s_;
}

// Adds the times of the finished copies (throttle sleeps included, random delays not).
void CudaStream::harvest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  harvest_locked();
}
// ... and of the finished waits.
void CudaStream::harvest_locked() const {
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

void* CudaDeviceAllocator::allocate(int64_t bytes, const char* what) {
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

void* CudaPinnedAllocator::allocate(int64_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, size_t(round_up(bytes)), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(str("pinned host memory: ", what, " needs ", bytes, " bytes (",
                    cudaGetErrorString(e), ")"));
  }
  return p;
}

}  // namespace memo::cuda_impl
