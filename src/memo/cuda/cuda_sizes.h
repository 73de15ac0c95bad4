// The sizes that depend on the CUDA backend's implementation (attention scratch, the reproducible
// row granularity, the matrix-product workspace, its native bf16 kernels), as plain functions of
// shapes: the CUDA backend reports them, and a plan for a CUDA run made on a machine without a GPU
// takes them from CudaSizes (memo plan --device cuda). No CUDA types: built everywhere.
#pragma once

#include <algorithm>
#include <cstdint>

#include "memo/cpu/cpu_backend.h"
#include "memo/cuda/chunked_attention.h"
#include "memo/cuda/flash_attention.h"

namespace memo {

// cuBLASLt's workspace, and the boundary it starts at within the buffer the caller hands over
// (Note [Matrix-product workspace] in backend/backend.h).
inline constexpr int64_t kCudaWorkspaceBytes = int64_t(32) << 20;
inline constexpr int64_t kCudaWorkspaceAlign = 256;
inline constexpr int64_t cuda_matmul_workspace_bytes() {
  return kCudaWorkspaceBytes + kCudaWorkspaceAlign;
}
// Products over token rows run in panels of this many rows (Note [Reproducible rows]; the
// details in cuda_backend.h, which re-exports it).
inline constexpr int64_t kCudaPanelRows = 256;
// The chunked attention's scratch in floats (Note [Chunked attention]); rows > 0: chunks of that
// height instead of the budget's.
inline int64_t cuda_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                    int64_t n_kv_heads, int64_t rows = 0) {
  return cuda::chunked_forward_scratch_numel(
      cuda::chunk_shape(1, seq, n_heads, n_kv_heads, head_dim, true, rows));
}
inline int64_t cuda_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                     int64_t n_kv_heads, int64_t rows = 0) {
  return cuda::chunked_backward_scratch_numel(
      cuda::chunk_shape(1, seq, n_heads, n_kv_heads, head_dim, true, rows));
}

// The fused bf16 kernels' (Note [Flash attention], where the head dim has them): none forward
// (one float, a scratch is never empty), delta [H, S] of one sequence backward.
inline int64_t cuda_bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim,
                                                         int64_t n_heads, int64_t n_kv_heads) {
  return cuda::flash_head_dim(head_dim)
             ? 1
             : cuda_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}
inline int64_t cuda_bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                          int64_t n_heads, int64_t n_kv_heads) {
  return cuda::flash_head_dim(head_dim)
             ? std::max<int64_t>(1, seq * n_heads)
             : cuda_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
}

// The reductions' partial sums (doubles): Adafactor's rows or chunks of its elements, plus one;
// the noise probe's chunks.
inline int64_t cuda_adafactor_partial_numel(int64_t rows, int64_t numel) {
  return std::max(rows, (numel + cuda::kAdafactorChunk - 1) / cuda::kAdafactorChunk) + 1;
}
inline int64_t cuda_noise_probe_partial_numel(int64_t n) {
  return (n + cuda::kNoiseProbeChunk - 1) / cuda::kNoiseProbeChunk;
}

// A target for MetaBackend that sizes a trace as the CUDA backend runs it (the fused bf16 attention
// and the chunked one, not MEMO_CUDA_ATTENTION=chunked): the CPU backend's shape checks
// with CUDA's sizes and native bf16 kernels (never run: a meta trace only asks it for sizes).
// CudaBackend.cuda_sizes_are_the_backends (tests/gpu/cuda_backend_check.cc) compares them on a
// GPU.
class CudaSizes final : public CpuBackend {
 public:
  const char* name() const override { return "cuda"; }
  int64_t reproducible_rows() const override { return kCudaPanelRows; }
  int64_t matmul_workspace_bytes() const override { return cuda_matmul_workspace_bytes(); }
  bool bf16_products() const override { return true; }
  bool bf16_attention() const override { return true; }
  bool masked_attention() const override { return true; }
  bool bf16_elementwise() const override { return true; }
  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override {
    return cuda_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override {
    return cuda_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                               int64_t n_kv_heads) override {
    return cuda_bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                int64_t n_kv_heads) override {
    return cuda_bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_decode_scratch_numel(int64_t) override { return 1; }
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override {
    return cuda_adafactor_partial_numel(rows, numel);
  }
  int64_t noise_probe_partial_numel(int64_t n) override {
    return cuda_noise_probe_partial_numel(n);
  }
};

}  // namespace memo
