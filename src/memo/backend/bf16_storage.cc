#include "memo/backend/bf16_storage.h"

#include <algorithm>
#include <utility>

#include "memo/core/error.h"

namespace memo {

// One kernel call's widened arguments: in(), io() and out() hand inner's kernel an f32 tensor of
// the same shape (the argument itself when it is f32 or empty); write_back() rounds the io() and
// out() arguments back into their bf16 memory after the kernel ran. out() is for an argument the
// kernel overwrites without reading (cpu/kernels.h says which): its f32 copy is not widened first,
// which saves a third of a product's conversions.
class Bf16StorageBackend::Call {
 public:
  explicit Call(Bf16StorageBackend& be, size_t first_slot = 0) : be_(be), next_(first_slot) {}
  size_t slots_used() const { return next_; }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  ConstTensor in(ConstTensor t) { return widen(t); }
  Tensor io(Tensor t) { return output(t, true); }
  Tensor out(Tensor t) { return output(t, false); }
  void write_back() {
    for (auto& [narrow, wide] : outputs_) be_.convert_any(narrow, wide);
    outputs_.clear();
  }

 private:
  Tensor output(Tensor t, bool read) {
    if (t.empty() || t.dtype() == DType::kF32) return t;
    Tensor wide = widen(t, read);
    outputs_.emplace_back(t, wide);
    return wide;
  }
  Tensor widen(ConstTensor t, bool read = true) {
    if (t.empty() || t.dtype() == DType::kF32)
      return Tensor(const_cast<void*>(t.data()), t.shape(), t.stride(), t.dtype(), t.space());
    MEMO_CHECK(t.dtype() == DType::kBF16, "bf16 storage: a ", dtype_name(t.dtype()), " argument ",
               t.shape(), "; memo stores activations in bf16 and everything else in f32");
    const size_t slot = next_++;
    if (be_.slots_.size() <= slot) be_.slots_.resize(slot + 1);
    RawBuffer& block = be_.slots_[slot];
    const int64_t bytes = t.numel() * int64_t(sizeof(float));
    if (block.bytes() < bytes) {
      block = RawBuffer();  // the old block goes before the larger one comes
      block = RawBuffer(be_.inner_.allocator(be_.inner_.device_space()), bytes,
                        "bf16 storage's widened arguments");
    }
    const Tensor wide = block.tensor(t.shape(), DType::kF32);
    if (read) be_.convert_any(wide, t);
    return wide;
  }

  Bf16StorageBackend& be_;
  size_t next_;
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (bf16 argument, its f32 copy)
};

Bf16StorageBackend::Bf16StorageBackend(Backend& inner) : inner_(inner) {
  MEMO_CHECK(inner.activation_dtype() == DType::kF32,
             "bf16 storage goes over a backend that computes in f32, not over ", inner.name(),
             " in ", dtype_name(inner.activation_dtype()));
}

std::string Bf16StorageBackend::describe() const {
  std::string native;
  if (inner_.bf16_products()) native += "products";
  if (inner_.bf16_attention()) native += native.empty() ? "attention" : ", attention";
  if (inner_.bf16_elementwise()) native += native.empty() ? "elementwise" : ", elementwise";
  return str("bf16 weights and activations; ", native.empty() ? "" : "native bf16 ", native,
             native.empty() ? "" : "; ", native.empty() ? "every kernel" : "the rest",
             " in f32 by conversion (Note [bf16 storage by conversion]) over ", inner_.describe());
}

std::string Bf16StorageBackend::warning() const {
  const std::string inner = inner_.warning();
  if (inner_.bf16_products() || !inner.empty()) return inner;
  return str(inner_.name(), " has no native bf16 products: bf16 runs compute in f32 by conversion,",
             " at about the fp32 rate (", inner_.describe(), ")");
}

int64_t Bf16StorageBackend::chunk_rows(int64_t floats_per_row) const {
  const int64_t panel = std::max<int64_t>(1, inner_.reproducible_rows());
  const int64_t fit = kChunkBytes / (std::max<int64_t>(1, floats_per_row) * int64_t(sizeof(float)));
  return std::max(panel, fit / panel * panel);
}

int64_t Bf16StorageBackend::scratch_bytes() const {
  int64_t n = 0;
  for (const RawBuffer& b : slots_) n += b.bytes();
  return n;
}

void Bf16StorageBackend::convert_any(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.shape() == src.shape(), "bf16 storage: ", dst.shape(), " from ", src.shape());
  if (dst.contiguous() && src.contiguous()) {
    inner_.convert(dst, src);
    return;
  }
  MEMO_CHECK(dst.ndim() == 2 && dst.stride()[1] == 1 && src.stride()[1] == 1,
             "bf16 storage: a strided ", dst.shape(), " tensor converts by rows of unit stride");
  for (int64_t r = 0; r < dst.rows(); ++r)
    inner_.convert(dst.slice_rows(r, r + 1), src.slice_rows(r, r + 1));
}

namespace {

bool all_bf16(std::initializer_list<ConstTensor> ts) {
  for (const ConstTensor& t : ts)
    if (t.dtype() != DType::kBF16) return false;
  return true;
}
// A row or elementwise kernel that inner runs on bf16 as it is (Backend::bf16_elementwise):
// whenever its statistics and gradient arguments are f32, as the model passes them.
bool elementwise(const Backend& inner, std::initializer_list<ConstTensor> f32_only = {}) {
  if (!inner.bf16_elementwise()) return false;
  for (const ConstTensor& t : f32_only)
    if (!t.empty() && t.dtype() != DType::kF32) return false;
  return true;
}
// Two bf16 operands for a backend with bf16 products: no widening.
bool native(const Backend& inner, ConstTensor a, ConstTensor b) {
  return inner.bf16_products() && a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16;
}

}  // namespace

// Note [Widened products by chunks]
// Where inner has no bf16 products, every product widens its bf16 operands, and a step spends
// about a tenth of its time converting (a perf profile under MEMO_CPU_ISA=avx2, configs/small.json
// at 1024 x 4). Widened whole, a [T, N] operand's f32 copy is written to memory and read back by
// the product; widened a chunk of about kChunkBytes at a time, it is still in the cache when the
// product reads it. So:
//   - a product whose result rows are a's rows (every token-wise product, and dx = dy w) goes
//     by chunks of rows, b widened once. For the token panels a chunk is a whole number of
//     inner's reproducible rows, so their bits do not change; a plain product's rows may change
//     their last bits (the BLAS's bits depend on the call's shape, Note [Token panels]), as
//     between any two calls of different shapes;
//   - a weight's gradient, an f32 c summed over a's and b's token rows (dw += dy^T x), goes by
//     chunks of the sum, c += a_chunk^T b_chunk, where c itself fits in kChunkBytes (else each
//     chunk would move more bytes of c than it saves). This changes the order of the sum, and
//     its bits, against one call.
// Chunks depend on the shapes only, so runs repeat bit for bit, the strategies agree (the token
// ranges memo rebuilds are token panels) and the plan's trace grows the same scratch.
// Where inner has bf16 products, the only products widened here are those with an f32 operand
// (the loss path, already in chunks of rows), which go whole as before.
bool Bf16StorageBackend::widens_by_chunks() const { return !inner_.bf16_products(); }

template <class Product>
void Bf16StorageBackend::by_row_chunks(Tensor c, ConstTensor a, ConstTensor b, float beta,
                                       const Product& product) {
  Call weights(*this);
  const ConstTensor wide_b = weights.in(b);
  const int64_t rows = chunk_rows(a.cols() + c.cols());
  for (int64_t r0 = 0; r0 < c.rows(); r0 += rows) {
    const int64_t r1 = std::min(c.rows(), r0 + rows);
    Call k(*this, weights.slots_used());
    const Tensor cr = c.slice_rows(r0, r1);
    product(beta == 0.0f ? k.out(cr) : k.io(cr), k.in(a.slice_rows(r0, r1)), wide_b);
    k.write_back();
  }
}

void Bf16StorageBackend::do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a,
                                   bool trans_b, float alpha, float beta) {
  if (native(inner_, a, b)) return inner_.matmul(c, a, b, trans_a, trans_b, alpha, beta);
  if (widens_by_chunks() && !trans_a && c.rows() > chunk_rows(a.cols() + c.cols()))
    return by_row_chunks(c, a, b, beta, [&](Tensor cr, ConstTensor ar, ConstTensor wide_b) {
      inner_.matmul(cr, ar, wide_b, false, trans_b, alpha, beta);
    });
  const int64_t sum_rows = chunk_rows(a.cols() + b.cols());
  if (widens_by_chunks() && trans_a && !trans_b && c.dtype() == DType::kF32 &&
      c.bytes() <= kChunkBytes && a.rows() > sum_rows) {
    for (int64_t r0 = 0; r0 < a.rows(); r0 += sum_rows) {
      const int64_t r1 = std::min(a.rows(), r0 + sum_rows);
      Call k(*this);
      inner_.matmul(c, k.in(a.slice_rows(r0, r1)), k.in(b.slice_rows(r0, r1)), true, false, alpha,
                    r0 == 0 ? beta : 1.0f);
    }
    return;
  }
  Call k(*this);
  inner_.matmul(beta == 0.0f ? k.out(c) : k.io(c), k.in(a), k.in(b), trans_a, trans_b, alpha, beta);
  k.write_back();
}

void Bf16StorageBackend::do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b,
                                                float beta) {
  if (native(inner_, a, b)) return inner_.matmul_token_panels(c, a, b, beta);
  if (widens_by_chunks())
    return by_row_chunks(c, a, b, beta, [&](Tensor cr, ConstTensor ar, ConstTensor wide_b) {
      inner_.matmul_token_panels(cr, ar, wide_b, beta);
    });
  Call k(*this);
  inner_.matmul_token_panels(beta == 0.0f ? k.out(c) : k.io(c), k.in(a), k.in(b), beta);
  k.write_back();
}

void Bf16StorageBackend::do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b,
                                                   float beta) {
  if (native(inner_, a, b)) return inner_.matmul_token_panels_kn(c, a, b, beta);
  if (widens_by_chunks())
    return by_row_chunks(c, a, b, beta, [&](Tensor cr, ConstTensor ar, ConstTensor wide_b) {
      inner_.matmul_token_panels_kn(cr, ar, wide_b, beta);
    });
  Call k(*this);
  inner_.matmul_token_panels_kn(beta == 0.0f ? k.out(c) : k.io(c), k.in(a), k.in(b), beta);
  k.write_back();
}

void Bf16StorageBackend::do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                            float eps) {
  if (elementwise(inner_, {inv_rms})) return inner_.rmsnorm_forward(y, inv_rms, x, w, eps);
  Call k(*this);
  inner_.rmsnorm_forward(k.io(y), k.io(inv_rms), k.in(x), k.in(w), eps);
  k.write_back();
}

void Bf16StorageBackend::do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                             ConstTensor w, ConstTensor inv_rms) {
  if (elementwise(inner_, {dw, inv_rms})) return inner_.rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
  Call k(*this);
  inner_.rmsnorm_backward(k.io(dx), k.io(dw), k.in(dy), k.in(x), k.in(w), k.in(inv_rms));
  k.write_back();
}

void Bf16StorageBackend::do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                              ConstTensor w, ConstTensor b, float eps) {
  if (elementwise(inner_, {mean, rstd}))
    return inner_.layernorm_forward(y, mean, rstd, x, w, b, eps);
  Call k(*this);
  inner_.layernorm_forward(k.io(y), k.io(mean), k.io(rstd), k.in(x), k.in(w), k.in(b), eps);
  k.write_back();
}

void Bf16StorageBackend::do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy,
                                               ConstTensor x, ConstTensor w, ConstTensor mean,
                                               ConstTensor rstd) {
  if (elementwise(inner_, {dw, db, mean, rstd}))
    return inner_.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
  Call k(*this);
  inner_.layernorm_backward(k.io(dx), k.io(dw), k.io(db), k.in(dy), k.in(x), k.in(w), k.in(mean),
                            k.in(rstd));
  k.write_back();
}

void Bf16StorageBackend::do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                                       double attention_factor, int64_t first_position) {
  Call k(*this);
  inner_.rope_table(k.io(cos), k.io(sin), inv_freq, attention_factor, first_position);
  k.write_back();
}

void Bf16StorageBackend::do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin,
                                         int64_t head_dim, int64_t first_row) {
  if (elementwise(inner_, {cos, sin})) return inner_.rope_forward(x, cos, sin, head_dim, first_row);
  Call k(*this);
  inner_.rope_forward(k.io(x), k.in(cos), k.in(sin), head_dim, first_row);
  k.write_back();
}

void Bf16StorageBackend::do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin,
                                          int64_t head_dim, int64_t first_row) {
  if (elementwise(inner_, {cos, sin}))
    return inner_.rope_backward(dx, cos, sin, head_dim, first_row);
  Call k(*this);
  inner_.rope_backward(k.io(dx), k.in(cos), k.in(sin), head_dim, first_row);
  k.write_back();
}

void Bf16StorageBackend::do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  if (elementwise(inner_)) return inner_.swiglu_forward(a, g, u);
  Call k(*this);
  inner_.swiglu_forward(k.io(a), k.in(g), k.in(u));
  k.write_back();
}

void Bf16StorageBackend::do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                            ConstTensor u) {
  if (elementwise(inner_)) return inner_.swiglu_backward(dg, du, da, g, u);
  Call k(*this);
  inner_.swiglu_backward(k.io(dg), k.io(du), k.in(da), k.in(g), k.in(u));
  k.write_back();
}

void Bf16StorageBackend::do_gelu_forward(Tensor y, ConstTensor x) {
  if (elementwise(inner_)) return inner_.gelu_forward(y, x);
  Call k(*this);
  inner_.gelu_forward(k.io(y), k.in(x));
  k.write_back();
}

void Bf16StorageBackend::do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  if (elementwise(inner_)) return inner_.gelu_backward(dx, dy, x);
  Call k(*this);
  inner_.gelu_backward(k.io(dx), k.in(dy), k.in(x));
  k.write_back();
}

void Bf16StorageBackend::do_bias_add(Tensor y, ConstTensor b) {
  if (elementwise(inner_)) return inner_.bias_add(y, b);
  Call k(*this);
  inner_.bias_add(k.io(y), k.in(b));
  k.write_back();
}

void Bf16StorageBackend::do_bias_backward(Tensor db, ConstTensor dy) {
  if (elementwise(inner_, {db})) return inner_.bias_backward(db, dy);
  Call k(*this);
  inner_.bias_backward(k.io(db), k.in(dy));
  k.write_back();
}

void Bf16StorageBackend::do_embedding_forward(Tensor x, View<const int32_t> tokens,
                                              ConstTensor wte) {
  if (elementwise(inner_)) return inner_.embedding_forward(x, tokens, wte);
  Call k(*this);
  inner_.embedding_forward(k.io(x), tokens, k.in(wte));
  k.write_back();
}

void Bf16StorageBackend::do_embedding_backward(Tensor dwte, ConstTensor dx,
                                               View<const int32_t> tokens) {
  if (elementwise(inner_, {dwte})) return inner_.embedding_backward(dwte, dx, tokens);
  Call k(*this);
  inner_.embedding_backward(k.io(dwte), k.in(dx), tokens);
  k.write_back();
}

void Bf16StorageBackend::do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                          View<const int32_t> targets, float grad_scale) {
  Call k(*this);
  inner_.cross_entropy(k.io(losses), k.io(dlogits), k.in(logits), targets, grad_scale);
  k.write_back();
}

void Bf16StorageBackend::do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit,
                                                    ConstTensor logits,
                                                    View<const int32_t> targets) {
  Call k(*this);
  inner_.vocab_parallel_ce_stats(k.io(stats), k.io(target_logit), k.in(logits), targets);
  k.write_back();
}

void Bf16StorageBackend::do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                              View<const int32_t> targets, ConstTensor stats,
                                              ConstTensor target_logit, float grad_scale) {
  Call k(*this);
  inner_.vocab_parallel_ce(k.io(losses), k.io(dlogits), k.in(logits), targets, k.in(stats),
                           k.in(target_logit), grad_scale);
  k.write_back();
}

void Bf16StorageBackend::do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k_,
                                              ConstTensor v, int64_t batch, int64_t n_heads,
                                              int64_t n_kv_heads, Tensor scratch, AttnMask mask) {
  if (inner_.bf16_attention() && all_bf16({o, q, k_, v}))
    return inner_.attention_forward(o, lse, q, k_, v, batch, n_heads, n_kv_heads, scratch, mask);
  Call k(*this);
  inner_.attention_forward(k.out(o), k.io(lse), k.in(q), k.in(k_), k.in(v), batch, n_heads,
                           n_kv_heads, k.io(scratch), mask);
  k.write_back();
}

void Bf16StorageBackend::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout,
                                               ConstTensor q, ConstTensor k_, ConstTensor v,
                                               ConstTensor o, ConstTensor lse, int64_t batch,
                                               int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                                               AttnMask mask) {
  if (inner_.bf16_attention() && all_bf16({dq, dk, dv, dout, q, k_, v, o}))
    return inner_.attention_backward(dq, dk, dv, dout, q, k_, v, o, lse, batch, n_heads, n_kv_heads,
                                     scratch, mask);
  Call k(*this);
  inner_.attention_backward(k.out(dq), k.out(dk), k.out(dv), k.in(dout), k.in(q), k.in(k_), k.in(v),
                            k.in(o), k.in(lse), batch, n_heads, n_kv_heads, k.io(scratch), mask);
  k.write_back();
}

void Bf16StorageBackend::do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part,
                                            ConstTensor lse_part) {
  Call k(*this);
  inner_.attention_merge(k.io(o), k.io(lse), k.in(o_part), k.in(lse_part));
  k.write_back();
}

void Bf16StorageBackend::do_attention_decode(Tensor o, ConstTensor q, ConstTensor k_, ConstTensor v,
                                             int64_t first, int64_t n_heads, int64_t n_kv_heads,
                                             Tensor scratch) {
  Call k(*this);
  inner_.attention_decode(k.io(o), k.in(q), k.in(k_), k.in(v), first, n_heads, n_kv_heads,
                          k.io(scratch));
  k.write_back();
}

void Bf16StorageBackend::do_copy(Tensor dst, ConstTensor src) {
  if (dst.dtype() == DType::kF32 && src.dtype() == DType::kF32) {
    inner_.copy(dst, src);
    return;
  }
  MEMO_CHECK(dst.dtype() == src.dtype(), "copy: ", dtype_name(src.dtype()), " to ",
             dtype_name(dst.dtype()), " is a convert");
  if (elementwise(inner_)) return inner_.copy(dst, src);
  convert_any(dst, src);  // a dtype to itself: the bits
}

void Bf16StorageBackend::do_convert(Tensor dst, ConstTensor src) { inner_.convert(dst, src); }

void Bf16StorageBackend::do_fill(Tensor dst, float value) {
  if (elementwise(inner_)) return inner_.fill(dst, value);
  Call k(*this);
  inner_.fill(k.io(dst), value);
  k.write_back();
}

void Bf16StorageBackend::do_scale(Tensor x, float factor) {
  if (elementwise(inner_)) return inner_.scale(x, factor);
  Call k(*this);
  inner_.scale(k.io(x), factor);
  k.write_back();
}

void Bf16StorageBackend::do_add_into(Tensor dst, ConstTensor src) {
  if (elementwise(inner_)) return inner_.add_into(dst, src);
  Call k(*this);
  inner_.add_into(k.io(dst), k.in(src));
  k.write_back();
}

double Bf16StorageBackend::do_sum(ConstTensor x) {
  Call k(*this);
  return inner_.sum(k.in(x));
}

double Bf16StorageBackend::do_sum_squares(ConstTensor x) {
  Call k(*this);
  return inner_.sum_squares(k.in(x));
}

double Bf16StorageBackend::do_noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass,
                                               View<double> partial) {
  Call k(*this);
  const double r = inner_.noise_probe_pass(k.io(g), k.io(sum), pass, partial);
  k.write_back();
  return r;
}

// The optimiser's tensors are f32 (master weights, gradients, state): they pass through, and a
// bf16 one is widened and rounded back like any other argument.
void Bf16StorageBackend::do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) {
  Call k(*this);
  inner_.sgd_update(k.io(p), k.io(buf), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_signsgd_update(Tensor p, Tensor m, ConstTensor g,
                                           const SignSgdStep& s) {
  Call k(*this);
  inner_.signsgd_update(k.io(p), k.io(m), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                        const AdamStep& s) {
  Call k(*this);
  inner_.adam_update(k.io(p), k.io(m), k.io(v), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                         const AdamStep& s) {
  Call k(*this);
  inner_.adamw_update(k.io(p), k.io(m), k.io(v), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_adagrad_update(Tensor p, Tensor sum, ConstTensor g,
                                           const AdagradStep& s) {
  Call k(*this);
  inner_.adagrad_update(k.io(p), k.io(sum), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                           ConstTensor g, const RmspropStep& s) {
  Call k(*this);
  inner_.rmsprop_update(k.io(p), k.io(square_avg), k.io(grad_avg), k.io(buf), k.in(g), s);
  k.write_back();
}

void Bf16StorageBackend::do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) {
  Call k(*this);
  inner_.lion_update(k.io(p), k.io(m), k.in(g), s);
  k.write_back();
}

double Bf16StorageBackend::do_adafactor_rms(ConstTensor x, View<double> partial) {
  Call k(*this);
  return inner_.adafactor_rms(k.in(x), partial);
}

void Bf16StorageBackend::do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col,
                                                    ConstTensor g, Tensor row_inv, Tensor col_inv,
                                                    View<double> partial, const AdafactorStep& s) {
  Call k(*this);
  inner_.adafactor_update_matrix(k.io(p), k.io(m), k.io(row), k.io(col), k.in(g), k.io(row_inv),
                                 k.io(col_inv), partial, s);
  k.write_back();
}

void Bf16StorageBackend::do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                                    View<double> partial, const AdafactorStep& s) {
  Call k(*this);
  inner_.adafactor_update_vector(k.io(p), k.io(m), k.io(v), k.in(g), partial, s);
  k.write_back();
}

}  // namespace memo
