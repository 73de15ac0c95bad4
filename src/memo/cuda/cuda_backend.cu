// The CUDA backend: see cuda_backend.h. This file is its core: construction, memory, copies to
// and from the host, token ids, reduction scratch and the kernel profile (Note [Kernel profile]
// in backend_impl.cuh). Every kernel is a grid-stride loop over work items that calls one body
// of cuda/bodies.h (the same code tests/cuda/bodies_test.cc runs on the CPU), one family a file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "memo/cuda/backend_impl.cuh"

namespace memo {
namespace cuda_impl {

#ifndef MEMO_CUDA_ARCHITECTURES
#define MEMO_CUDA_ARCHITECTURES "90"
#endif

namespace {

// Loads nothing and does nothing: whether the GPU can run it says whether memo's kernels were
// built for this GPU (sm_XX code for its architecture, or PTX of an earlier one that the driver
// compiles for it).
__global__ void arch_probe_kernel() {}

}  // namespace

CudaBackend::CudaBackend(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw ConfigError(str("--device cuda: GPU ", device, " does not exist (", count, " found)"));
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  gpu_ = device;
  const char* profile = std::getenv("MEMO_CUDA_PROFILE");
  profile_ = profile && *profile && std::strcmp(profile, "0") != 0;
  const char* attention = std::getenv("MEMO_CUDA_ATTENTION");
  if (attention && *attention && std::strcmp(attention, "chunked") != 0 &&
      std::strcmp(attention, "flash") != 0)
    throw ConfigError(str("MEMO_CUDA_ATTENTION=", attention,
                          ": 'flash' (the default: bf16 activations, head dims 32, 64 and 128; the "
                          "chunked schedule otherwise) or 'chunked'"));
  if (attention && std::strcmp(attention, "chunked") == 0)
    attention_kind_ = AttentionKind::kChunked;
  compute_ = std::make_unique<CudaStream>("compute", StreamOptions{});
  check_lt(lt().cublasLtCreate(&lt_), "cublasLtCreate");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  device_name_ = prop.name;
  cudaFuncAttributes probe{};
  const cudaError_t image = cudaFuncGetAttributes(&probe, arch_probe_kernel);
  if (image == cudaErrorNoKernelImageForDevice || image == cudaErrorInvalidDeviceFunction ||
      image == cudaErrorUnsupportedPtxVersion) {
    cudaGetLastError();
    // the fused attention's bf16 mma.sync and ldmatrix need sm_80 (Ampere) or newer
    throw ConfigError(str(
        "--device cuda: GPU ", device, " (", prop.name, ") is sm_", prop.major, prop.minor,
        " and memo's CUDA kernels were built for CUDA architectures ", MEMO_CUDA_ARCHITECTURES,
        prop.major < 8 ? str("; they need sm_80 or newer")
                       : str("; rebuild with -DCMAKE_CUDA_ARCHITECTURES=", prop.major, prop.minor),
        " (", cudaGetErrorString(image), ")"));
  }
  check_cuda(image, "cudaFuncGetAttributes");
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

void CudaBackend::set_matmul_workspace(Tensor workspace) {
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

int64_t CudaBackend::device_free_bytes() {
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return int64_t(free);
}

void CudaBackend::copy_to_host(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  const Timed timed(this, "copy_to_host");
  check_cuda(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s()), "copy_to_host");
  check_cuda(cudaStreamSynchronize(s()), "copy_to_host");
}

void CudaBackend::copy_from_host(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  const Timed timed(this, "copy_from_host");
  check_cuda(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s()), "copy_from_host");
  check_cuda(cudaStreamSynchronize(s()), "copy_from_host");
}

double CudaBackend::host_ordered_sum(const double* device, int64_t n) {
  host_doubles_.resize(size_t(n));
  copy_to_host(host_doubles_.data(), device, n * int64_t(sizeof(double)));
  double total = 0.0;
  for (double v : host_doubles_) total += v;
  return total;
}

double* CudaBackend::device_doubles(int64_t n) {
  if (doubles_.bytes() < n * int64_t(sizeof(double)))
    doubles_ = RawBuffer(device_, n * int64_t(sizeof(double)), "cuda reduction partials");
  return doubles_.as<double>();
}

namespace {

// What memory p is in: ordinary host (cudaMemoryTypeUnregistered), pinned host or device.
cudaMemoryType memory_type(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return a.type;
}

}  // namespace

bool CudaBackend::on_host(const void* p) {
  const cudaMemoryType t = memory_type(p);
  return t == cudaMemoryTypeUnregistered || t == cudaMemoryTypeHost;
}

const int32_t* CudaBackend::device_ids(View<const int32_t> ids) {
  MEMO_CHECK(ids.contiguous(), "cuda: token ids not contiguous");
  if (!on_host(ids.data())) return ids.data();
  const int64_t bytes = ids.numel() * int64_t(sizeof(int32_t));
  if (ids_.bytes() < bytes) ids_ = RawBuffer(device_, bytes, "cuda token ids");
  if (bytes > 0)
    check_cuda(cudaMemcpyAsync(ids_.data(), ids.data(), size_t(bytes), cudaMemcpyHostToDevice, s()),
               "token ids");
  return ids_.as<const int32_t>();
}

const int32_t* CudaBackend::device_key_start(View<const int32_t> key_start) {
  if (key_start.empty()) return nullptr;
  MEMO_CHECK(key_start.contiguous(), "cuda: an attention mask's key_start not contiguous");
  const int64_t bytes = key_start.numel() * int64_t(sizeof(int32_t));
  if (key_start_.bytes() < bytes)
    key_start_ = RawBuffer(device_, bytes, "cuda attention key_start");
  check_cuda(cudaMemcpyAsync(key_start_.data(), key_start.data(), size_t(bytes),
                             cudaMemcpyHostToDevice, s()),
             "attention key_start");
  return key_start_.as<const int32_t>();
}

// --- the profile (Note [Kernel profile]) ---

CudaBackend::Timed::Timed(CudaBackend* b, const char* op)
    : b_(b->profile_ && b->timed_depth_ == 0 ? b : nullptr), op_(op) {
  if (!b_) return;
  b_->timed_depth_ = 1;
  host_start_ = std::chrono::steady_clock::now();
  start_ = b_->timing_event();
}

CudaBackend::Timed::~Timed() {
  if (!b_) return;
  b_->pending_.emplace_back(op_, start_, b_->timing_event());
  if (b_->pending_.size() >= 4096) b_->harvest_timings();
  b_->op_times_[op_].host_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_)
          .count();
  b_->timed_depth_ = 0;
}

// Timing events never throw: they run in destructors; a failed one is simply not counted.
cudaEvent_t CudaBackend::timing_event() {
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) == cudaSuccess) cudaEventRecord(e, s());
  return e;
}

void CudaBackend::harvest_timings() {
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

void CudaBackend::print_profile() {
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

}  // namespace cuda_impl

using cuda_impl::CudaBackend;

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
