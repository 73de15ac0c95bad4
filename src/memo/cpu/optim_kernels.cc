#include "memo/cpu/optim_kernels.h"

#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"

namespace memo::cpu {
namespace {

// Loops over fewer elements run on one thread: below this a parallel region's fork and barrier
// cost more than the loop. Results do not depend on it: every loop is elementwise or uses fixed
// chunks.
constexpr int64_t kParallelMinNumel = int64_t(1) << 14;

inline float sign_of(float x) { return float((x > 0.0f) - (x < 0.0f)); }

// Note [Deterministic reductions]
// Sums over a tensor (RMS(p), RMS(U), the mean of the row means) must not depend on the thread
// count, so they are never OpenMP reductions: each fixed chunk (a matrix row, or kChunk elements
// of a vector) is summed serially in double by one thread, then the chunk sums are added in order.
constexpr int64_t kChunk = 1024;

// numel: the elements all chunks cover, to decide whether threads pay off.
template <class ChunkSum>
double ordered_sum(int64_t chunks, int64_t numel, ChunkSum chunk_sum, double* partial) {
#pragma omp parallel for schedule(static) if (numel >= kParallelMinNumel)
  for (int64_t k = 0; k < chunks; ++k) partial[k] = chunk_sum(k);
  double total = 0.0;
  for (int64_t k = 0; k < chunks; ++k) total += partial[k];
  return total;
}

// The state tensors an update may use: each empty (switched off) or of p's length.
float* state_ptr(const Tensor& t) { return t.empty() ? nullptr : t.data(); }

}  // namespace

int64_t adafactor_chunks(int64_t numel) { return (numel + kChunk - 1) / kChunk; }

void sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) {
  check_optimizer_update("sgd_update", p, g, {buf});
  float* pp = p.data();
  const float* gp = g.data();
  const int64_t n = p.numel();
  const float lr_f = s.lr, wd = s.weight_decay, mu = s.momentum, keep_grad = s.keep_grad;
  if (buf.empty()) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) pp[j] -= lr_f * (gp[j] + wd * pp[j]);
    return;
  }
  float* b = buf.data();
  const bool first = s.first, nesterov = s.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    const float d = gp[j] + wd * pp[j];
    b[j] = first ? d : mu * b[j] + keep_grad * d;
    pp[j] -= lr_f * (nesterov ? d + mu * b[j] : b[j]);
  }
}

void signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) {
  check_optimizer_update("signsgd_update", p, g, {m});
  float* pp = p.data();
  const float* gp = g.data();
  const int64_t n = p.numel();
  const float keep = s.keep, lr_f = s.lr, beta = s.momentum, rest = s.one_minus_momentum;
  if (m.empty()) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) pp[j] = pp[j] * keep - lr_f * sign_of(gp[j]);
    return;
  }
  float* mp = m.data();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    mp[j] = beta * mp[j] + rest * gp[j];
    pp[j] = pp[j] * keep - lr_f * sign_of(mp[j]);
  }
}

void adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) {
  check_optimizer_update("adam_update", p, g, {m, v});
  float* pp = p.data();
  const float* gp = g.data();
  float* mp = m.data();
  float* vp = v.data();
  const int64_t n = p.numel();
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.weight_decay;
  const float r1 = s.one_minus_beta1, r2 = s.one_minus_beta2;
  const float bias2_sqrt = s.bias2_sqrt, step_size = s.step_size;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    const float d = gp[j] + wd * pp[j];
    mp[j] = b1 * mp[j] + r1 * d;
    vp[j] = b2 * vp[j] + r2 * d * d;
    pp[j] -= step_size * (mp[j] / (std::sqrt(vp[j]) / bias2_sqrt + eps));
  }
}

void adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) {
  check_optimizer_update("adamw_update", p, g, {m, v});
  float* pp = p.data();
  const float* gp = g.data();
  float* mp = m.data();
  float* vp = v.data();
  const int64_t n = p.numel();
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, keep = s.keep;
  const float r1 = s.one_minus_beta1, r2 = s.one_minus_beta2;
  const float bias2_sqrt = s.bias2_sqrt, step_size = s.step_size;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    pp[j] *= keep;
    mp[j] = b1 * mp[j] + r1 * gp[j];
    vp[j] = b2 * vp[j] + r2 * gp[j] * gp[j];
    const float denom = std::sqrt(vp[j]) / bias2_sqrt + eps;
    pp[j] -= step_size * (mp[j] / denom);
  }
}

void adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) {
  check_optimizer_update("adagrad_update", p, g, {sum});
  float* pp = p.data();
  const float* gp = g.data();
  float* sp = sum.data();
  const int64_t n = p.numel();
  const float clr = s.lr, eps = s.eps, wd = s.weight_decay;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    const float d = gp[j] + wd * pp[j];
    sp[j] += d * d;
    pp[j] -= clr * (d / (std::sqrt(sp[j]) + eps));
  }
}

void rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                    const RmspropStep& s) {
  check_optimizer_update("rmsprop_update", p, g, {square_avg, grad_avg, buf});
  float* pp = p.data();
  const float* gp = g.data();
  float* v = square_avg.data();
  float* a = state_ptr(grad_avg);
  float* b = state_ptr(buf);
  const int64_t n = p.numel();
  const float alpha = s.alpha, eps = s.eps, mu = s.momentum, lr_f = s.lr, wd = s.weight_decay;
  const float rest = s.one_minus_alpha;
  const bool centered = a != nullptr, use_momentum = b != nullptr;
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    const float d = gp[j] + wd * pp[j];
    v[j] = alpha * v[j] + rest * d * d;
    float var = v[j];
    if (centered) {
      a[j] = alpha * a[j] + rest * d;
      var = v[j] - a[j] * a[j];
    }
    const float den = std::sqrt(var) + eps;
    if (use_momentum) {
      b[j] = mu * b[j] + d / den;
      pp[j] -= lr_f * b[j];
    } else {
      pp[j] -= lr_f * (d / den);
    }
  }
}

void lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) {
  check_optimizer_update("lion_update", p, g, {m});
  float* pp = p.data();
  const float* gp = g.data();
  float* mp = m.data();
  const int64_t n = p.numel();
  const float b1 = s.beta1, b2 = s.beta2, lr_f = s.lr, keep = s.keep;
  const float r1 = s.one_minus_beta1, r2 = s.one_minus_beta2;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    const float c = b1 * mp[j] + r1 * gp[j];
    pp[j] = pp[j] * keep - lr_f * sign_of(c);
    mp[j] = b2 * mp[j] + r2 * gp[j];
  }
}

double adafactor_rms(ConstTensor x, View<double> partial) {
  const float* xp = x.data();
  const int64_t n = x.numel();
  MEMO_CHECK(x.contiguous() && partial.numel() >= adafactor_chunks(n), "adafactor_rms: x ",
             x.shape(), " with ", partial.numel(), " partial sums");
  const double sum_sq = ordered_sum(
      adafactor_chunks(n), n,
      [&](int64_t k) {
        double s = 0.0;
        for (int64_t j = k * kChunk; j < std::min(n, (k + 1) * kChunk); ++j)
          s += double(xp[j]) * xp[j];
        return s;
      },
      partial.data());
  return std::sqrt(sum_sq / double(n));
}

void adafactor_update_matrix(Tensor p, Tensor m, Tensor row_t, Tensor col_t, ConstTensor g,
                             Tensor row_inv, Tensor col_inv, View<double> partial,
                             const AdafactorStep& s) {
  check_optimizer_update("adafactor_update_matrix", p, g, {m});
  const int64_t R = p.rows(), C = p.cols(), n = R * C;
  MEMO_CHECK(p.ndim() == 2 && row_t.numel() == R && col_t.numel() == C && row_inv.numel() >= R &&
                 col_inv.numel() >= C && partial.numel() >= R,
             "adafactor_update_matrix: p ", p.shape(), " row ", row_t.shape(), " col ",
             col_t.shape(), " scratch ", row_inv.shape(), " ", col_inv.shape(), " ",
             partial.shape());
  float* pp = p.data();
  const float* gp = g.data();
  float* mp = state_ptr(m);
  const float b = s.beta2t, rb = s.one_minus_beta2t, eps1 = s.eps1;
  float* row = row_t.data();
  float* col = col_t.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t r = 0; r < R; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += double(gp[r * C + c] * gp[r * C + c] + eps1);
    row[r] = b * row[r] + rb * float(sum / double(C));
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t c = 0; c < C; ++c) {  // strided reads; Adafactor's matrices are read once per step
    double sum = 0.0;
    for (int64_t r = 0; r < R; ++r) sum += double(gp[r * C + c] * gp[r * C + c] + eps1);
    col[c] = b * col[c] + rb * float(sum / double(R));
  }
  double row_sum = 0.0;
  for (int64_t r = 0; r < R; ++r) row_sum += row[r];
  const double row_mean = row_sum / double(R);
  float* ri = row_inv.data();
  float* ci = col_inv.data();
  for (int64_t r = 0; r < R; ++r) ri[r] = float(1.0 / std::sqrt(double(row[r]) / row_mean));
  for (int64_t c = 0; c < C; ++c) ci[c] = float(1.0 / std::sqrt(double(col[c])));
  const double sum_sq_u = ordered_sum(
      R, R * C,
      [&](int64_t r) {
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const float u = gp[r * C + c] * ri[r] * ci[c];
          sum += double(u) * u;
        }
        return sum;
      },
      partial.data());
  const double rms_u = std::sqrt(sum_sq_u / double(R * C));
  const float scale = float(s.alpha / std::max(1.0, rms_u / s.clip_threshold));
  const float b1 = s.beta1, r1 = s.one_minus_beta1, keep = s.keep;
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t j = r * C + c;
      float update = scale * (gp[j] * ri[r] * ci[c]);
      if (mp) {
        mp[j] = b1 * mp[j] + r1 * update;
        update = mp[j];
      }
      pp[j] = pp[j] * keep - update;
    }
  }
}

void adafactor_update_vector(Tensor p, Tensor m, Tensor v_t, ConstTensor g, View<double> partial,
                             const AdafactorStep& s) {
  check_optimizer_update("adafactor_update_vector", p, g, {m, v_t});
  const int64_t n = p.numel();
  MEMO_CHECK(partial.numel() >= adafactor_chunks(n), "adafactor_update_vector: ", partial.numel(),
             " partial sums for ", n, " elements");
  float* pp = p.data();
  const float* gp = g.data();
  float* mp = state_ptr(m);
  float* v = v_t.data();
  const float b = s.beta2t, rb = s.one_minus_beta2t, eps1 = s.eps1;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) v[j] = b * v[j] + rb * (gp[j] * gp[j] + eps1);
  const double sum_sq_u = ordered_sum(
      adafactor_chunks(n), n,
      [&](int64_t k) {
        double sum = 0.0;
        for (int64_t j = k * kChunk; j < std::min(n, (k + 1) * kChunk); ++j) {
          const float u = gp[j] / std::sqrt(v[j]);
          sum += double(u) * u;
        }
        return sum;
      },
      partial.data());
  const double rms_u = std::sqrt(sum_sq_u / double(n));
  const float scale = float(s.alpha / std::max(1.0, rms_u / s.clip_threshold));
  const float b1 = s.beta1, r1 = s.one_minus_beta1, keep = s.keep;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    float update = scale * (gp[j] / std::sqrt(v[j]));
    if (mp) {
      mp[j] = b1 * mp[j] + r1 * update;
      update = mp[j];
    }
    pp[j] = pp[j] * keep - update;
  }
}

}  // namespace memo::cpu
