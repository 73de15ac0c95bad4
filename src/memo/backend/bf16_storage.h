// bf16 storage over a backend that computes in f32: memo's mixed precision on any backend whose
// kernels are f32 (the CPU's today; the CUDA backend's until its bf16 kernels exist). See
// Note [bf16 storage by conversion].
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/raw_allocator.h"

namespace memo {

// Note [bf16 storage by conversion]
// Mixed precision as Megatron-LM runs it: the layers' weights and activations are bf16; master
// weights, gradients, optimiser state, per-token statistics, the log-sum-exp and the loss path
// are f32 (Model keeps an f32 master copy and a bf16 working copy, Note [Mixed precision] in
// model/model.h). A GPU kernel in this scheme reads bf16, computes in f32 registers and rounds its
// result to bf16 once, when it stores it. Bf16StorageBackend gives exactly those semantics on top
// of `inner`'s f32 kernels: each kernel call widens its bf16 arguments into f32 scratch of inner's
// device space (exact), runs inner's kernel, and rounds every bf16 output back (nearest even),
// outputs that accumulate (+=) included, which are widened first. f32 arguments (gradients,
// statistics, scratch, optimiser state) pass through untouched. So:
//   - It is the reference a native bf16 kernel must match: the same inputs and one rounding of
//     the f32 result; only the f32 summation order may differ.
//   - Rounding is element by element, so inner's reproducible rows (Note [Reproducible rows])
//     still hold, and keep, recompute, offload and memo give the same bits in bf16 too.
//   - Activations take half the memory in the arena and the host pool. The widened copies are
//     scratch outside the arena: a grow-only block per argument position, which the plan's traced
//     micro-batch (run on this backend) grows to its size, so the device need counts
//     scratch_bytes() before step 1 (DeviceNeed::conversion_scratch_bytes). The kernels run at
//     inner's f32 rate: this is for correctness and memory, not speed.
//   - Native bf16 kernels replace it kernel by kernel. The first: where inner.bf16_products()
//     (CUDA's cuBLASLt products, bf16 in, f32 accumulate), a product of two bf16 operands goes
//     to inner as it is, with no scratch; a product with an f32 operand (the loss gradient
//     times the head) is widened as above. The second: where inner.bf16_attention(), attention
//     forward and backward over bf16 activations go to inner as they are (CUDA's chunked
//     attention, which rounds P and dS to bf16 where this keeps them in f32: within a few bf16
//     roundings, Note [Chunked attention]). The third: where inner.bf16_elementwise(), the
//     layers' row and elementwise kernels go to inner as they are (CUDA, Note [bf16 bodies]:
//     the same bits as here), so a bf16 CUDA run widens nothing but the loss path's products.
class Bf16StorageBackend final : public Backend {
 public:
  // inner computes in f32 and must outlive this.
  explicit Bf16StorageBackend(Backend& inner);
  Backend& inner() const { return inner_; }
  // A product's widened token rows go by chunks of about this many bytes of f32 (Note [Widened
  // products by chunks] in bf16_storage.cc).
  static constexpr int64_t kChunkBytes = int64_t(1) << 20;
  // Whether products are widened chunk by chunk: where inner has no bf16 products.
  bool widens_by_chunks() const;
  // Bytes of widened scratch held now (grows to the largest call's need, then stays).
  int64_t scratch_bytes() const;
  // Lets the scratch go, so that the next calls grow it to their own need (a plan measuring it
  // at another length). No kernel may be in flight.
  void release_scratch() { slots_.clear(); }

  const char* name() const override { return inner_.name(); }
  std::string describe() const override;
  // inner's warning, or that inner has no bf16 products (the run goes at about the f32 rate).
  std::string warning() const override;
  std::string device_name() const override { return inner_.device_name(); }
  bool has_values() const override { return inner_.has_values(); }
  int64_t reproducible_rows() const override { return inner_.reproducible_rows(); }
  DType activation_dtype() const override { return DType::kBF16; }
  MemSpace device_space() const override { return inner_.device_space(); }
  RawAllocator& allocator(MemSpace space) override { return inner_.allocator(space); }
  bool host_can_access(MemSpace space) const override { return inner_.host_can_access(space); }
  int64_t device_free_bytes() override { return inner_.device_free_bytes(); }
  Stream& compute_stream() override { return inner_.compute_stream(); }
  std::unique_ptr<Stream> make_copy_stream(std::string name,
                                           const StreamOptions& options) override {
    return inner_.make_copy_stream(std::move(name), options);
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    inner_.copy_to_host(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, int64_t bytes) override {
    inner_.copy_from_host(dst, src, bytes);
  }
  // The ceiling of this backend's products: inner's bf16 one where it has bf16 products.
  double measure_matmul_peak_flops(double seconds) override {
    return inner_.bf16_products() ? inner_.measure_bf16_matmul_peak_flops(seconds)
                                  : inner_.measure_matmul_peak_flops(seconds);
  }
  bool bf16_products() const override { return inner_.bf16_products(); }
  bool bf16_attention() const override { return inner_.bf16_attention(); }
  bool masked_attention() const override { return inner_.masked_attention(); }
  bool bf16_elementwise() const override { return inner_.bf16_elementwise(); }
  int64_t matmul_workspace_bytes() const override { return inner_.matmul_workspace_bytes(); }
  bool host_reads_ids(const int32_t* ids) const override { return inner_.host_reads_ids(ids); }
  void set_matmul_workspace(Tensor workspace) override { inner_.set_matmul_workspace(workspace); }

  int64_t attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                          int64_t n_kv_heads) override {
    return inner_.bf16_attention()
               ? inner_.bf16_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
               : inner_.attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_backward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                           int64_t n_kv_heads) override {
    return inner_.bf16_attention()
               ? inner_.bf16_attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads)
               : inner_.attention_backward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  // an f32 call passes to inner as it is
  int64_t f32_attention_forward_scratch_numel(int64_t seq, int64_t head_dim, int64_t n_heads,
                                              int64_t n_kv_heads) override {
    return inner_.f32_attention_forward_scratch_numel(seq, head_dim, n_heads, n_kv_heads);
  }
  int64_t attention_decode_scratch_numel(int64_t keys) override {
    return inner_.attention_decode_scratch_numel(keys);
  }
  int64_t noise_probe_partial_numel(int64_t n) override {
    return inner_.noise_probe_partial_numel(n);
  }
  int64_t adafactor_partial_numel(int64_t rows, int64_t numel) override {
    return inner_.adafactor_partial_numel(rows, numel);
  }

 protected:
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
  void do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                            AttnMask mask) override;
  void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                             ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                             int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                             AttnMask mask) override;
  void do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) override;
  void do_attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                           int64_t n_heads, int64_t n_kv_heads, Tensor scratch) override;
  void do_copy(Tensor dst, ConstTensor src) override;
  void do_convert(Tensor dst, ConstTensor src) override;
  void do_fill(Tensor dst, float value) override;
  void do_scale(Tensor x, float factor) override;
  void do_add_into(Tensor dst, ConstTensor src) override;
  double do_sum(ConstTensor x) override;
  double do_sum_squares(ConstTensor x) override;
  double do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                             View<double> partial) override;
  void do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) override;
  void do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) override;
  void do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) override;
  void do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) override;
  void do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) override;
  void do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                         const RmspropStep& s) override;
  void do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) override;
  double do_adafactor_rms(ConstTensor x, View<double> partial) override;
  void do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col, ConstTensor g,
                                  Tensor row_inv, Tensor col_inv, View<double> partial,
                                  const AdafactorStep& s) override;
  void do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g, View<double> partial,
                                  const AdafactorStep& s) override;

 private:
  class Call;
  // The rows of a chunk: about kChunkBytes of f32 operand and result rows, a multiple of inner's
  // reproducible rows.
  int64_t chunk_rows(int64_t floats_per_row) const;
  // c = product(c's rows, a's rows, b widened) chunk by chunk of rows (beta: c is read).
  template <class Product>
  void by_row_chunks(Tensor c, ConstTensor a, ConstTensor b, float beta, const Product& product);
  // dst = src converted (either dtype), contiguous or by rows with unit column stride.
  void convert_any(Tensor dst, ConstTensor src);
  Backend& inner_;
  std::vector<RawBuffer> slots_;  // one grow-only block per argument position of a call
};

}  // namespace memo
