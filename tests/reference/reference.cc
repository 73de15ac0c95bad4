// Float64 references (see reference.h): plain loops from the math, used only by tests. Shapes
// are checked with MEMO_CHECK; token ids and targets are trusted (the tests pass valid ones).
#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace memo::cpu {

void matmul_ref(TensorF64 c, ConstTensorF64 a, ConstTensorF64 b, bool trans_a, bool trans_b,
                double alpha, double beta) {
  const int64_t M = c.rows(), N = c.cols(), K = trans_a ? a.rows() : a.cols();
  MEMO_CHECK((trans_a ? a.cols() : a.rows()) == M && (trans_b ? b.rows() : b.cols()) == N &&
                 (trans_b ? b.cols() : b.rows()) == K,
             "matmul_ref: c ", c.shape(), " a ", a.shape(), " b ", b.shape());
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k)
        sum += (trans_a ? a(k, i) : a(i, k)) * (trans_b ? b(j, k) : b(k, j));
      c(i, j) = alpha * sum + (beta == 0.0 ? 0.0 : beta * c(i, j));
    }
  }
}

// y = x r w,  r = 1 / sqrt(mean x^2 + eps)
void rmsnorm_forward_ref(TensorF64 y, TensorF64 inv_rms, ConstTensorF64 x, ConstTensorF64 w,
                         double eps) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(same_shape(x, y) && w.numel() == C && inv_rms.numel() == T, "rmsnorm_forward_ref");
  for (int64_t t = 0; t < T; ++t) {
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += x(t, c) * x(t, c);
    inv_rms[t] = 1.0 / std::sqrt(sum_sq / double(C) + eps);
    for (int64_t c = 0; c < C; ++c) y(t, c) = x(t, c) * inv_rms[t] * w[c];
  }
}

// dx += r w dy - x r^3 mean(w dy x);  dw += sum_t dy x r
void rmsnorm_backward_ref(TensorF64 dx, TensorF64 dw, ConstTensorF64 dy, ConstTensorF64 x,
                          ConstTensorF64 w, ConstTensorF64 inv_rms) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(same_shape(x, dx) && same_shape(x, dy) && w.numel() == C && dw.numel() == C &&
                 inv_rms.numel() == T,
             "rmsnorm_backward_ref");
  for (int64_t t = 0; t < T; ++t) {
    const double r = inv_rms[t];
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += w[c] * dy(t, c) * x(t, c);
    for (int64_t c = 0; c < C; ++c) {
      dx(t, c) += r * w[c] * dy(t, c) - x(t, c) * r * r * r * dot / double(C);
      dw[c] += dy(t, c) * x(t, c) * r;
    }
  }
}

// y = (x - mean) r w + b,  r = 1 / sqrt(mean (x - mean)^2 + eps)
void layernorm_forward_ref(TensorF64 y, TensorF64 mean, TensorF64 rstd, ConstTensorF64 x,
                           ConstTensorF64 w, ConstTensorF64 b, double eps) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(same_shape(x, y) && w.numel() == C && b.numel() == C && mean.numel() == T &&
                 rstd.numel() == T,
             "layernorm_forward_ref");
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += x(t, c);
    mean[t] = sum / double(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += (x(t, c) - mean[t]) * (x(t, c) - mean[t]);
    rstd[t] = 1.0 / std::sqrt(sum_sq / double(C) + eps);
    for (int64_t c = 0; c < C; ++c) y(t, c) = (x(t, c) - mean[t]) * rstd[t] * w[c] + b[c];
  }
}

// xhat = (x - mean) r, g = w dy:  dx += r (g - mean(g) - xhat mean(g xhat));  dw += sum_t dy xhat;
// db += sum_t dy
void layernorm_backward_ref(TensorF64 dx, TensorF64 dw, TensorF64 db, ConstTensorF64 dy,
                            ConstTensorF64 x, ConstTensorF64 w, ConstTensorF64 mean,
                            ConstTensorF64 rstd) {
  const int64_t T = x.rows(), C = x.cols();
  MEMO_CHECK(same_shape(x, dx) && same_shape(x, dy) && w.numel() == C && dw.numel() == C &&
                 db.numel() == C && mean.numel() == T && rstd.numel() == T,
             "layernorm_backward_ref");
  for (int64_t t = 0; t < T; ++t) {
    const double r = rstd[t];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      sum_g += w[c] * dy(t, c);
      sum_gx += w[c] * dy(t, c) * (x(t, c) - mean[t]) * r;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x(t, c) - mean[t]) * r;
      dx(t, c) += r * (w[c] * dy(t, c) - sum_g / double(C) - xhat * sum_gx / double(C));
      dw[c] += dy(t, c) * xhat;
      db[c] += dy(t, c);
    }
  }
}

// cos[p, i] = cos(p theta^(-2i/D)), sin likewise
void rope_table_ref(TensorF64 cos, TensorF64 sin, int64_t head_dim, double theta) {
  MEMO_CHECK(cos.cols() == head_dim / 2 && same_shape(cos, sin), "rope_table_ref");
  for (int64_t p = 0; p < cos.rows(); ++p) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double angle = double(p) * std::pow(theta, -2.0 * double(i) / double(head_dim));
      cos(p, i) = std::cos(angle);
      sin(p, i) = std::sin(angle);
    }
  }
}

namespace {
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) with sin negated when sign = -1.
void rotate_ref(TensorF64 x, ConstTensorF64 cos, ConstTensorF64 sin, int64_t head_dim,
                double sign) {
  const int64_t S = cos.rows(), half = head_dim / 2;
  MEMO_CHECK(x.cols() % head_dim == 0 && cos.cols() == half && same_shape(cos, sin), "rope_ref");
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t h = 0; h < x.cols() / head_dim; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos(t % S, i), s = sign * sin(t % S, i);
        const double x1 = x(t, h * head_dim + i), x2 = x(t, h * head_dim + half + i);
        x(t, h * head_dim + i) = x1 * c - x2 * s;
        x(t, h * head_dim + half + i) = x2 * c + x1 * s;
      }
    }
  }
}
}  // namespace

void rope_forward_ref(TensorF64 x, ConstTensorF64 cos, ConstTensorF64 sin, int64_t head_dim) {
  rotate_ref(x, cos, sin, head_dim, 1.0);
}

// Transpose of the rotation matrix [[c, -s], [s, c]] is [[c, s], [-s, c]]: rotation by -angle.
void rope_backward_ref(TensorF64 dx, ConstTensorF64 cos, ConstTensorF64 sin, int64_t head_dim) {
  rotate_ref(dx, cos, sin, head_dim, -1.0);
}

namespace {
double sigmoid_ref(double g) { return 1.0 / (1.0 + std::exp(-g)); }
}  // namespace

// a = g sigmoid(g) u
void swiglu_forward_ref(TensorF64 a, ConstTensorF64 g, ConstTensorF64 u) {
  MEMO_CHECK(same_shape(a, g) && same_shape(a, u), "swiglu_forward_ref");
  for (int64_t t = 0; t < g.rows(); ++t)
    for (int64_t f = 0; f < g.cols(); ++f) a(t, f) = g(t, f) * sigmoid_ref(g(t, f)) * u(t, f);
}

// du = da g s;  dg = da u (s + g s (1 - s))
void swiglu_backward_ref(TensorF64 dg, TensorF64 du, ConstTensorF64 da, ConstTensorF64 g,
                         ConstTensorF64 u) {
  MEMO_CHECK(same_shape(dg, g) && same_shape(du, g) && same_shape(da, g) && same_shape(u, g),
             "swiglu_backward_ref");
  for (int64_t t = 0; t < g.rows(); ++t) {
    for (int64_t f = 0; f < g.cols(); ++f) {
      const double x = g(t, f), s = sigmoid_ref(x);
      du(t, f) = da(t, f) * x * s;
      dg(t, f) = da(t, f) * u(t, f) * (s + x * s * (1.0 - s));
    }
  }
}

// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x sigmoid(2u): the
// same function (0.5 (1 + tanh(u)) = sigmoid(2u)), without the cancellation in 1 + tanh(u) that
// leaves no correct digit for u < -19 even in double.
namespace {
constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubicRef = 0.044715;
}  // namespace

void gelu_forward_ref(TensorF64 y, ConstTensorF64 x) {
  MEMO_CHECK(same_shape(x, y), "gelu_forward_ref");
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t c = 0; c < x.cols(); ++c) {
      const double v = x(t, c), u = kGeluK * (v + kGeluCubicRef * v * v * v);
      y(t, c) = v * sigmoid_ref(2.0 * u);
    }
  }
}

// dx = dy (s + x s (1 - s) 2 u'),  s = sigmoid(2u),  u' = sqrt(2/pi) (1 + 3 0.044715 x^2)
void gelu_backward_ref(TensorF64 dx, ConstTensorF64 dy, ConstTensorF64 x) {
  MEMO_CHECK(same_shape(x, dx) && same_shape(x, dy), "gelu_backward_ref");
  for (int64_t t = 0; t < x.rows(); ++t) {
    for (int64_t c = 0; c < x.cols(); ++c) {
      const double v = x(t, c), u = kGeluK * (v + kGeluCubicRef * v * v * v);
      const double s = sigmoid_ref(2.0 * u);
      const double du = kGeluK * (1.0 + 3.0 * kGeluCubicRef * v * v);
      dx(t, c) = dy(t, c) * (s + v * s * (1.0 - s) * 2.0 * du);
    }
  }
}

void bias_backward_ref(TensorF64 db, ConstTensorF64 dy) {
  MEMO_CHECK(db.numel() == dy.cols(), "bias_backward_ref");
  for (int64_t t = 0; t < dy.rows(); ++t)
    for (int64_t c = 0; c < dy.cols(); ++c) db[c] += dy(t, c);
}

void embedding_forward_ref(TensorF64 x, View<const int32_t> tokens, ConstTensorF64 wte) {
  MEMO_CHECK(tokens.numel() == x.rows() && wte.cols() == x.cols(), "embedding_forward_ref");
  for (int64_t t = 0; t < x.rows(); ++t)
    for (int64_t c = 0; c < x.cols(); ++c) x(t, c) = wte(tokens.data()[t], c);
}

void embedding_backward_ref(TensorF64 dwte, ConstTensorF64 dx, View<const int32_t> tokens) {
  MEMO_CHECK(tokens.numel() == dx.rows() && dwte.cols() == dx.cols(), "embedding_backward_ref");
  for (int64_t t = 0; t < dx.rows(); ++t)
    for (int64_t c = 0; c < dx.cols(); ++c) dwte(tokens.data()[t], c) += dx(t, c);
}

// loss = log sum_c exp(x_c) - x_y;  dx_c = (softmax(x)_c - [c == y]) grad_scale
void cross_entropy_ref(TensorF64 losses, TensorF64 dlogits, ConstTensorF64 logits,
                       View<const int32_t> targets, double grad_scale) {
  const int64_t T = logits.rows(), V = logits.cols();
  MEMO_CHECK(losses.numel() == T && targets.numel() == T &&
                 (dlogits.empty() || same_shape(dlogits, logits)),
             "cross_entropy_ref");
  for (int64_t t = 0; t < T; ++t) {
    double m = logits(t, 0);
    for (int64_t c = 0; c < V; ++c) m = std::max(m, logits(t, c));
    double sum = 0.0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(logits(t, c) - m);
    const double lse = m + std::log(sum);
    const int32_t y = targets.data()[t];
    losses[t] = lse - logits(t, y);
    if (dlogits.empty()) continue;
    for (int64_t c = 0; c < V; ++c)
      dlogits(t, c) = (std::exp(logits(t, c) - lse) - (c == y ? 1.0 : 0.0)) * grad_scale;
  }
}

}  // namespace memo::cpu
