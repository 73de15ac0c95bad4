#include "memo/optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

namespace {

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

int64_t chunk_count(int64_t n) { return (n + kChunk - 1) / kChunk; }

// RMS of x[0, n), see Note [Deterministic reductions].
double rms(const float* x, int64_t n, double* partial) {
  const double sum_sq = ordered_sum(
      chunk_count(n), n,
      [&](int64_t k) {
        double s = 0.0;
        for (int64_t j = k * kChunk; j < std::min(n, (k + 1) * kChunk); ++j) s += double(x[j]) * x[j];
        return s;
      },
      partial);
  return std::sqrt(sum_sq / double(n));
}

}  // namespace

Adafactor::Adafactor(const ParamLayout& layout, AdafactorOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)) {
  check_decay_mask(layout, decay_);
  check_option(options_.beta1 >= 0.0 && options_.beta1 < 1.0, "adafactor", "beta1",
               options_.beta1, "[0, 1)");
  check_option(options_.decay_exponent > 0.0 && options_.decay_exponent <= 1.0, "adafactor",
               "decay_exponent", options_.decay_exponent, "(0, 1]");
  check_option(options_.eps1 > 0.0, "adafactor", "eps1", options_.eps1, "(0, inf)");
  check_option(options_.eps2 >= 0.0, "adafactor", "eps2", options_.eps2, "[0, inf)");
  check_option(options_.clip_threshold > 0.0, "adafactor", "clip_threshold",
               options_.clip_threshold, "(0, inf)");
  check_option(options_.weight_decay >= 0.0, "adafactor", "weight_decay", options_.weight_decay,
               "[0, inf)");
  int64_t v_numel = 0, max_rows = 1, max_cols = 1, max_chunks = 1;
  for (const ParamInfo& info : layout.params()) {
    Slot s;
    s.offset = v_numel;
    if (info.is_matrix()) {
      s.rows = info.shape[0];
      s.cols = info.shape[1];
      v_numel += s.rows + s.cols;
      max_rows = std::max(max_rows, s.rows);
      max_cols = std::max(max_cols, s.cols);
    } else {
      v_numel += info.numel;
    }
    max_chunks = std::max({max_chunks, s.rows, chunk_count(info.numel)});
    slots_.push_back(s);
  }
  v_ = AlignedBuffer<float>(v_numel);
  if (options_.beta1 > 0.0) m_ = AlignedBuffer<float>(layout.total_numel());
  row_inv_ = AlignedBuffer<float>(max_rows);
  col_inv_ = AlignedBuffer<float>(max_cols);
  partial_ = AlignedBuffer<double>(max_chunks);
}

void Adafactor::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const double t = double(steps_done_);
  beta2t_ = 1.0 - std::pow(t, -options_.decay_exponent);  // 0 at t = 1: no bias correction needed
  const double rho = std::min(1e-2, 1.0 / std::sqrt(t));
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* m = options_.beta1 > 0.0 ? m_.data() + info.offset : nullptr;
    // alpha_t from p_{t-1}, before this step changes it.
    const double alpha = options_.relative_step
                             ? std::max(options_.eps2, rms(p, info.numel, partial_.data())) * rho
                             : lr;
    const float keep = decay_[i] ? float(1.0 - alpha * options_.weight_decay) : 1.0f;
    if (slots_[i].rows > 0)
      update_factored(p, g, m, slots_[i], keep, float(alpha));
    else
      update_vector(p, g, m, v_.data() + slots_[i].offset, info.numel, keep, float(alpha));
  }
}

// Algorithm 4: R = b R + (1 - b) mean_j(g^2 + eps1), C = b C + (1 - b) mean_i(g^2 + eps1) (means,
// not the paper's sums: V_hat = R C / sum(R) is the same either way), U = g / sqrt(V_hat),
// U_hat = U / max(1, RMS(U) / d), p -= alpha U_hat.
void Adafactor::update_factored(float* p, const float* g, float* m, const Slot& s, float keep,
                                float alpha) {
  const int64_t R = s.rows, C = s.cols, n = R * C;
  const float b = float(beta2t_), eps1 = float(options_.eps1);
  float* row = v_.data() + s.offset;
  float* col = row + R;
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t r = 0; r < R; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += double(g[r * C + c] * g[r * C + c] + eps1);
    row[r] = b * row[r] + (1.0f - b) * float(sum / double(C));
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t c = 0; c < C; ++c) {  // strided reads; Adafactor's matrices are read once per step
    double sum = 0.0;
    for (int64_t r = 0; r < R; ++r) sum += double(g[r * C + c] * g[r * C + c] + eps1);
    col[c] = b * col[c] + (1.0f - b) * float(sum / double(R));
  }
  double row_sum = 0.0;
  for (int64_t r = 0; r < R; ++r) row_sum += row[r];
  const double row_mean = row_sum / double(R);
  float* ri = row_inv_.data();
  float* ci = col_inv_.data();
  for (int64_t r = 0; r < R; ++r) ri[r] = float(1.0 / std::sqrt(double(row[r]) / row_mean));
  for (int64_t c = 0; c < C; ++c) ci[c] = float(1.0 / std::sqrt(double(col[c])));
  const double sum_sq_u = ordered_sum(
      R, R * C,
      [&](int64_t r) {
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const float u = g[r * C + c] * ri[r] * ci[c];
          sum += double(u) * u;
        }
        return sum;
      },
      partial_.data());
  const double rms_u = std::sqrt(sum_sq_u / double(R * C));
  const float scale = float(alpha / std::max(1.0, rms_u / options_.clip_threshold));
  const float b1 = float(options_.beta1);
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t j = r * C + c;
      float update = scale * (g[j] * ri[r] * ci[c]);
      if (m) {
        m[j] = b1 * m[j] + (1.0f - b1) * update;
        update = m[j];
      }
      p[j] = p[j] * keep - update;
    }
  }
}

// Algorithm 5: V = b V + (1 - b)(g^2 + eps1), U = g / sqrt(V), then as for matrices.
void Adafactor::update_vector(float* p, const float* g, float* m, float* v, int64_t n, float keep,
                              float alpha) {
  const float b = float(beta2t_), eps1 = float(options_.eps1);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) v[j] = b * v[j] + (1.0f - b) * (g[j] * g[j] + eps1);
  const double sum_sq_u = ordered_sum(
      chunk_count(n), n,
      [&](int64_t k) {
        double sum = 0.0;
        for (int64_t j = k * kChunk; j < std::min(n, (k + 1) * kChunk); ++j) {
          const float u = g[j] / std::sqrt(v[j]);
          sum += double(u) * u;
        }
        return sum;
      },
      partial_.data());
  const double rms_u = std::sqrt(sum_sq_u / double(n));
  const float scale = float(alpha / std::max(1.0, rms_u / options_.clip_threshold));
  const float b1 = float(options_.beta1);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
  for (int64_t j = 0; j < n; ++j) {
    float update = scale * (g[j] / std::sqrt(v[j]));
    if (m) {
      m[j] = b1 * m[j] + (1.0f - b1) * update;
      update = m[j];
    }
    p[j] = p[j] * keep - update;
  }
}

std::vector<StateTensor> Adafactor::state() {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const Slot& s = slots_[i];
    float* v = v_.data() + s.offset;
    if (s.rows > 0) {
      out.push_back({"exp_avg_sq_row." + info.name, {s.rows}, v});
      out.push_back({"exp_avg_sq_col." + info.name, {s.cols}, v + s.rows});
    } else {
      out.push_back({"exp_avg_sq." + info.name, info.shape, v});
    }
    if (options_.beta1 > 0.0)
      out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset});
  }
  return out;
}

}  // namespace memo
