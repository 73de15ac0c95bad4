// Elements of the CPU's row and elementwise kernels, f32 or bf16 (Note [bf16 elementwise on the
// CPU]): wide() reads one as f32 (exact), put() writes an f32 result, rounding a bf16 one to
// nearest even. Internal to cpu/.
#pragma once

#include "memo/core/dtype.h"

namespace memo::cpu {

// Note [bf16 elementwise on the CPU]
// The layers' row and elementwise kernels (norms, RoPE, SwiGLU, GELU, biases, embeddings, copy,
// fill, scale, add) are written once over their element types: activations and working weights
// f32 or bf16, statistics and gradients of weights f32. A bf16 kernel widens each element it reads
// (exact), computes in f32 exactly as the f32 kernel does, and rounds each element it writes once
// (+= reads, adds in f32, rounds). That is what Bf16StorageBackend does around an f32 kernel
// (widen every input, run, round each output once), so the CPU backend runs them on bf16 tensors
// directly (Backend::bf16_elementwise) with the same bits and without the widened copies or their
// scratch; tests/cpu/elementwise_bf16_test.cc holds the two to the same bits. As on CUDA (Note
// [bf16 bodies]).
inline float wide(float x) { return x; }
inline float wide(bf16 x) { return bf16_to_float(x); }
inline void put(float& dst, float x) { dst = x; }
inline void put(bf16& dst, float x) { dst = float_to_bf16(x); }

}  // namespace memo::cpu
