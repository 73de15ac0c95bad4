// The one interface between the engine and a device: memory spaces, streams, the reproducibility
// promise, and every kernel the model, the strategies and the optimiser step call. Layers hold a
// Backend& and never name an implementation. Implementations: CpuBackend (cpu/, today's
// fp32 kernels), MetaBackend (meta/, shapes and address ranges only: what planning traces
// with), and CUDA (cuda/, issue #10). See docs/architecture.md for where a new one plugs
// in. Kernel semantics (math, argument order, += versus =) are those stated in
// cpu/kernels.h; the entry checks of backend/checks.h run once, in the interface (Note [Checked
// entry points]).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "memo/backend/attn_mask.h"
#include "memo/backend/optim_kernels.h"
#include "memo/backend/raw_allocator.h"
#include "memo/backend/stream.h"
#include "memo/core/dtype.h"
#include "memo/core/tensor.h"

namespace memo {

// Which micro-batch of a step the noise-scale probe's fused pass sees (train/grad_noise.h).
enum class NoiseProbePass { kFirst, kMiddle, kLast };

// Plain RoPE's inverse frequencies theta^(-2i/head_dim), i < head_dim / 2, in double.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta);

// The optimiser updates are a sub-interface of their own (OptimizerKernels, optim_kernels.h) that
// every backend provides by inheritance; optimisers reach them through optimizer_kernels().
class Backend : public OptimizerKernels {
 public:
  ~Backend() override = default;
  OptimizerKernels& optimizer_kernels() { return *this; }
  virtual const char* name() const = 0;  // "cpu", "meta", "cuda"
  // One line for the start-of-run log (the BLAS and its kernel on the CPU, the GPU on CUDA).
  virtual std::string describe() const = 0;
  // A one-line warning about how this backend will run, for the start of a run (the CPU: a BLAS
  // kernel below or above what the processor supports); empty when there is none.
  virtual std::string warning() const { return ""; }
  // The accelerator's product name as its driver reports it ("NVIDIA H200"), for finding its
  // datasheet in hardware/; empty for the CPU and meta backends.
  virtual std::string device_name() const = 0;
  // False for the meta backend: kernels check shapes and return, reductions return 0.
  virtual bool has_values() const = 0;

  // Note [Reproducible rows]
  // A per-token product over rows [r0, r1) of a [T, *] tensor gives the same bits as the same
  // rows of the product over all T rows whenever r0 is a multiple of reproducible_rows() (the CPU:
  // its 128-row token panels, Note [Token panels] in cpu/matmul.cc). The memo strategy
  // rounds its offloaded rows (alpha) down to this granularity, and Architecture::recompute_tokens
  // refuses other starts, so every strategy gives bitwise-identical losses. 0: the backend promises
  // no such granularity; memo then splits at any row and its losses agree with keep's only within
  // the tolerance stated in memory/memo.h.
  virtual int64_t reproducible_rows() const = 0;
  // The dtype the layers' activations are stored and computed in (the CPU: f32; a GPU in mixed
  // precision: bf16). Per-token statistics, the loss path and attention scratch are always f32.
  virtual DType activation_dtype() const = 0;

  // Memory: where the engine's "device" tensors (weights, gradients, optimiser state, the
  // activation arena) live, and a raw allocator for each space the backend offers. Throws
  // ConfigError for a space it lacks.
  virtual MemSpace device_space() const = 0;
  virtual RawAllocator& allocator(MemSpace space) = 0;
  // Whether host code may read and write memory of `space` directly (the CPU: every space; CUDA:
  // host and pinned host; meta: none). Where not, it goes through copy_to_host / copy_from_host.
  virtual bool host_can_access(MemSpace space) const = 0;
  // Free bytes of the device space now, the default --device-memory budget (a GPU's free memory);
  // 0 where the device space has no fixed size of its own (the CPU's is host memory; meta).
  virtual int64_t device_free_bytes() = 0;

  // Streams: the one compute stream kernels are ordered on, and new copy streams (the swap
  // scheduler's device-to-host and host-to-device). Both outlive nothing of the backend.
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> make_copy_stream(std::string name,
                                                   const StreamOptions& options) = 0;
  // The host reads device values only through this: dst (host) = src (device space), after the
  // compute stream's work so far. Never operator[] on a device view.
  virtual void copy_to_host(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, int64_t bytes) = 0;
  // Peak fp32 (CPU) or bf16 (GPU) matrix-product rate measured now over ~`seconds`, FLOP/s: the
  // MFU denominator.
  virtual double measure_matmul_peak_flops(double seconds) = 0;
  // The same for products of bf16 operands where bf16_products(): the ceiling of a bf16 run.
  virtual double measure_bf16_matmul_peak_flops(double seconds) {
    return measure_matmul_peak_flops(seconds);
  }

  // Note [Matrix-product workspace]
  // Scratch the matrix products may use (cuBLASLt's workspace on CUDA; 0 on the CPU and meta
  // backends). The backend owns none: whoever runs products hands it one of at least
  // matmul_workspace_bytes() in the device space for their duration (the model's step and
  // evaluation take it from the activation allocator, so it is a named buffer of the static plan,
  // "matmul.workspace"; the decoder from its own buffers), and an empty tensor after. Products run
  // without one (workspace-free algorithms) when none is set; the algorithm is fixed per shape
  // and workspace size, so runs with the same workspace give the same bits.
  virtual int64_t matmul_workspace_bytes() const = 0;
  virtual void set_matmul_workspace(Tensor workspace) = 0;

  // Whether the matrix products (matmul, matmul_token_panels, matmul_token_panels_kn) take bf16
  // a and b natively, c f32 or bf16, accumulating in f32 and rounding a bf16 c once (CUDA:
  // cuBLASLt). Bf16StorageBackend hands such products to the backend as they are; every other
  // kernel of the backend computes in f32 (Note [bf16 storage by conversion]).
  virtual bool bf16_products() const { return false; }
  // Whether attention_forward and attention_backward take bf16 q, k, v, o, dout, dq, dk, dv
  // natively (lse and scratch f32; CUDA's chunked attention, Note [Chunked attention]): computing
  // in f32, rounding P and dS to bf16 before their products and each output once.
  // Bf16StorageBackend hands such calls over as they are.
  virtual bool bf16_attention() const { return false; }
  // Whether attention_forward and attention_backward take a mask's key_start (backend/attn_mask.h:
  // document masks and sliding windows). CUDA's kernels do not yet.
  virtual bool masked_attention() const { return true; }
  // Whether the layers' row and elementwise kernels (norms, RoPE, SwiGLU, GELU, bias, embedding,
  // copy, fill, scale, add_into) take bf16 activations and weights natively, reading each as f32
  // and rounding each output element once: the bits of the f32 kernel over the widened inputs,
  // rounded (CUDA, Note [bf16 bodies] in cuda/bodies.h). Their statistics and gradient arguments
  // (inv_rms, mean, rstd, dw, db, dwte) stay f32. Bf16StorageBackend hands such calls over.
  virtual bool bf16_elementwise() const { return false; }

  // --- kernels: see cpu/kernels.h for the math of each ---
  void matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
              float alpha = 1.0f, float beta = 0.0f);
  // Per-token products (c, a: [T, *] rows; b: [N, K] weights), bit-exact on any row range that
  // starts at a multiple of reproducible_rows().
  void matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta = 0.0f);
  void matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta = 0.0f);
  void rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps);
  void rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                        ConstTensor inv_rms);
  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                         ConstTensor b, float eps);
  void layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                          ConstTensor w, ConstTensor mean, ConstTensor rstd);
  // Rows p of the [S, D/2] tables: cos and sin of (first_position + p) * inv_freq[i], times the
  // attention factor (model/rope_scaling.h computes both; rope_inv_freq above is plain RoPE's).
  void rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                  double attention_factor = 1.0, int64_t first_position = 0);
  void rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                    int64_t first_row = 0);
  void rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                     int64_t first_row = 0);
  void swiglu_forward(Tensor a, ConstTensor g, ConstTensor u);
  void swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u);
  void gelu_forward(Tensor y, ConstTensor x);
  void gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x);
  void bias_add(Tensor y, ConstTensor b);
  void bias_backward(Tensor db, ConstTensor dy);
  // Token ids live in the device space: where the host cannot read it, the model checks them
  // against the vocabulary (DataError naming the position) and copies them there; a backend
  // whose host can read them checks them again (backend/checks.h).
  void embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte);
  void embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens);
  void cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits, View<const int32_t> targets,
                     float grad_scale);
  // The loss over a tensor-parallel rank's part of the vocabulary (cpu/kernels.h).
  void vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                               View<const int32_t> targets);
  void vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                         View<const int32_t> targets, ConstTensor stats, ConstTensor target_logit,
                         float grad_scale);
  // Scratch of the attention kernels, in floats, for sequences (chunks) of `seq` rows: a property
  // of the implementation (the CPU's grows with its threads, CUDA's with seq x n_heads).
  virtual int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                  int64_t n_kv_heads) = 0;
  void attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                         int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                         AttnMask mask);
  virtual int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                                   int64_t n_kv_heads) = 0;
  // The same over bf16 activations, where bf16_attention() (CUDA's fused kernels need less than
  // its f32 schedule: Note [Flash attention]); Bf16StorageBackend and MetaBackend ask for these
  // when their activations are bf16.
  virtual int64_t bf16_attention_forward_scratch_numel(int64_t seq, int64_t head_dim,
                                                       int64_t n_heads, int64_t n_kv_heads) {
    return attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  virtual int64_t bf16_attention_backward_scratch_numel(int64_t seq, int64_t head_dim,
                                                        int64_t n_heads, int64_t n_kv_heads) {
    return attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  // The forward's over f32 activations on any backend, whatever activation_dtype() is: what a
  // caller that computes in f32 beside bf16 layers needs (the KV decoder). A wrapper that stores
  // bf16 (Bf16StorageBackend, MetaBackend) answers for the f32 call its inner backend receives.
  virtual int64_t f32_attention_forward_scratch_numel(int64_t seq, int64_t head_dim,
                                                      int64_t n_heads, int64_t n_kv_heads) {
    return attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                          ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                          int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                          AttnMask mask);
  void attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part);

  // Causal attention of n new rows over a key/value cache (generation), see cpu/kernels.h.
  virtual int64_t attention_decode_scratch_numel(int64_t keys) = 0;
  void attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                        int64_t n_heads, int64_t n_kv_heads, Tensor scratch);

  // --- elementwise and reductions (cpu/tensor_ops.h) ---
  void copy(Tensor dst, ConstTensor src);
  // dst = src in dst's dtype, element for element (contiguous, equal element counts): f32 to bf16
  // rounds to nearest even (NaN stays NaN), bf16 to f32 is exact, a dtype to itself copies. The
  // mixed-precision step's working copies of f32 weights and gradients go through it.
  void convert(Tensor dst, ConstTensor src);
  void fill(Tensor dst, float value);
  void scale(Tensor x, float factor);
  void add_into(Tensor dst, ConstTensor src);
  // Reductions return to the host (an explicit read of device values), summed in double in a
  // fixed order: deterministic.
  double sum(ConstTensor x);          // sum x, in index order
  double sum_squares(ConstTensor x);  // sum x^2
  // The noise-scale probe's one pass over a micro-batch gradient g (train/grad_noise.h): returns
  // sum g^2 and kFirst: sum = g, g = 0; kMiddle: sum += g, g = 0; kLast: g += sum. partial:
  // scratch of noise_probe_partial_numel(n) doubles.
  virtual int64_t noise_probe_partial_numel(int64_t n) = 0;
  double noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass, View<double> partial);

  // Whether the entry checks may read token and target ids at `ids` on the host (checks.h:
  // ids_on_host): the CPU and meta backends always; CUDA where they are in host memory.
  virtual bool host_reads_ids(const int32_t* ids) const { return true; }

 protected:
  // Note [Checked entry points]
  // Each kernel above is a non-virtual entry point (backend.cc) that runs its entry checks of
  // backend/checks.h once, for every backend, and then calls the backend's do_<kernel> with the
  // same arguments. An implementation checks only what is its own (its dtypes and memory
  // spaces, its scratch figures) and never repeats a shape check. The optimiser updates follow
  // the same rule (optim_kernels.h).
  virtual void do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b,
                         float alpha, float beta) = 0;
  virtual void do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) = 0;
  virtual void do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) = 0;
  virtual void do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                  float eps) = 0;
  virtual void do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                   ConstTensor w, ConstTensor inv_rms) = 0;
  virtual void do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                    ConstTensor w, ConstTensor b, float eps) = 0;
  virtual void do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                                     ConstTensor w, ConstTensor mean, ConstTensor rstd) = 0;
  virtual void do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                             double attention_factor, int64_t first_position) = 0;
  virtual void do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                               int64_t first_row) = 0;
  virtual void do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                int64_t first_row) = 0;
  virtual void do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) = 0;
  virtual void do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                  ConstTensor u) = 0;
  virtual void do_gelu_forward(Tensor y, ConstTensor x) = 0;
  virtual void do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) = 0;
  virtual void do_bias_add(Tensor y, ConstTensor b) = 0;
  virtual void do_bias_backward(Tensor db, ConstTensor dy) = 0;
  virtual void do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) = 0;
  virtual void do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) = 0;
  virtual void do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                View<const int32_t> targets, float grad_scale) = 0;
  virtual void do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                          View<const int32_t> targets) = 0;
  virtual void do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                    View<const int32_t> targets, ConstTensor stats,
                                    ConstTensor target_logit, float grad_scale) = 0;
  virtual void do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k,
                                    ConstTensor v, int64_t batch, int64_t n_heads,
                                    int64_t n_kv_heads, Tensor scratch, AttnMask mask) = 0;
  virtual void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                     ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                     ConstTensor lse, int64_t batch, int64_t n_heads,
                                     int64_t n_kv_heads, Tensor scratch, AttnMask mask) = 0;
  virtual void do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part,
                                  ConstTensor lse_part) = 0;
  virtual void do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                                   int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                   Tensor scratch) = 0;
  virtual void do_copy(Tensor dst, ConstTensor src) = 0;
  virtual void do_convert(Tensor dst, ConstTensor src) = 0;
  virtual void do_fill(Tensor dst, float value) = 0;
  virtual void do_scale(Tensor x, float factor) = 0;
  virtual void do_add_into(Tensor dst, ConstTensor src) = 0;
  virtual double do_sum(ConstTensor x) = 0;
  virtual double do_sum_squares(ConstTensor x) = 0;
  virtual double do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                                     View<double> partial) = 0;
};

}  // namespace memo
