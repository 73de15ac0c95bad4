// The CUDA backend (issue #10): memo's Backend on one NVIDIA GPU, fp32 for now. Weights,
// gradients, optimiser state and activations live in device memory (cudaMalloc), the host pools
// of the offload strategies in pinned memory (cudaHostAlloc); kernels run in order on one
// compute stream, copies on their own streams, ordered by CUDA events with no host block
// (backend/stream.h). Matrix products go through cuBLASLt (fp32 in and out, fp32 compute, one
// algorithm fixed per shape); every other kernel is memo's own, its arithmetic in cuda/bodies.h,
// deterministic (no atomics). Attention runs as strided-batched cuBLASLt products over chunks of
// query rows with a softmax kernel between them (Note [Chunked attention] in
// cuda/chunked_attention.h). Not yet: native bf16 kernels beyond the products, a fused attention.
// This header has no CUDA types in it, so code that is built without the toolkit can name it.
#pragma once

#include <memory>

#include "memo/backend/backend.h"
#include "memo/cuda/cuda_sizes.h"

namespace memo {

// The GPUs this process sees. Throws ConfigError with a one-line reason where no CUDA GPU can be
// used (no driver, no device, a driver too old for this build).
int cuda_device_count();
// The backend on GPU `device` (the command line picks it: cli/runtime.h). Throws ConfigError as
// cuda_device_count does, or where the GPU does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device);
// cuBLASLt's version (e.g. 130100), opening it first if no backend has (Note [Loading cuBLASLt] in
// cublaslt.cu: memo loads it at run time, only for --device cuda); needs no GPU. Throws
// ConfigError naming the library where it cannot be opened or lacks a function memo calls.
int64_t cublaslt_version();
// The GPU the CUDA backend runs on; -1 for any other backend.
int cuda_device(Backend& backend);
// The CUDA backend's compute stream (a cudaStream_t), for a communicator to order its collectives
// after; null for any other backend.
void* cuda_compute_stream(Backend& backend);
// Test only: the CUDA backend's attention in chunks of `rows` query rows (0: the budget's,
// Note [Chunked attention]), so that small shapes run many chunks. Sizes asked before apply to
// calls made before; no effect on another backend.
void set_cuda_attention_chunk_rows(Backend& backend, int64_t rows);
// Test only: bf16 attention by the fused kernels (Note [Flash attention], the default where they
// apply) or by the chunked schedule; no effect on another backend.
void set_cuda_flash_attention(Backend& backend, bool on);

// Rows of a token-panel product that a recomputation may start at and get the same bits
// (Note [Reproducible rows] in backend/backend.h): products over token rows run as one cuBLASLt
// call per panel of this many rows counted from the view's first row, one algorithm fixed per
// shape and alignment. A range [r0, T) rebuilt in the same buffers (what memo recomputes) has the
// full product's panels from r0 on, so the same shapes, algorithms and bits; a range that ends
// elsewhere may end in a shorter panel of another algorithm.
// (kCudaPanelRows is defined in cuda_sizes.h, with the backend's other sizes.)

}  // namespace memo
