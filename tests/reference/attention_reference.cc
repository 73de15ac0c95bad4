// Plain float64 causal grouped-query attention, written straight from the math (see
// attention_reference.h). One (batch, head) at a time, full score matrix, double everywhere.
#include "reference/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace memo::cpu {
namespace {

struct RefShape {
  int64_t S, D, H, Hkv, G;
  bool causal = true;
  const int32_t* key_start = nullptr;  // AttnMask::key_start, [B S] or null
  int64_t first_key(int64_t b, int64_t i) const {
    return key_start ? std::clamp<int64_t>(key_start[b * S + i], 0, S) : 0;
  }
  int64_t last_key(int64_t i) const { return causal ? i : S - 1; }
};

RefShape check_ref_shapes(const View<const double>& q, const View<const double>& k,
                          const View<const double>& v, int64_t batch, int64_t n_heads,
                          int64_t n_kv_heads) {
  MEMO_CHECK(batch > 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
             "attention_ref: batch ", batch, " n_heads ", n_heads, " n_kv_heads ", n_kv_heads);
  MEMO_CHECK(q.ndim() == 2 && q.rows() % batch == 0 && q.cols() % n_heads == 0, "attention_ref: q ",
             q.shape());
  const int64_t D = q.cols() / n_heads;
  MEMO_CHECK(k.shape() == Shape({q.rows(), n_kv_heads * D}) && same_shape(k, v),
             "attention_ref: q ", q.shape(), " k ", k.shape(), " v ", v.shape());
  return {q.rows() / batch, D, n_heads, n_kv_heads, n_heads / n_kv_heads};
}

// For one (b, h): p[i*S + j] = exp(s_ij - lse_i) for first_key <= j <= last_key(i) and 0
// elsewhere; lse[i] = log sum_j exp(s_ij) over those j (-inf over none), s_ij = q_i.k_j / sqrt(D).
void ref_probs(std::vector<double>& p, std::vector<double>& lse, const View<const double>& q,
               const View<const double>& k, const RefShape& s, int64_t b, int64_t h) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  const int64_t hk = h / s.G;
  p.assign(s.S * s.S, 0.0);
  lse.assign(s.S, 0.0);
  for (int64_t i = 0; i < s.S; ++i) {
    double* row = &p[i * s.S];
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < s.D; ++d)
        dot += q(b * s.S + i, h * s.D + d) * k(b * s.S + j, hk * s.D + d);
      row[j] = dot * scale;
      mx = std::max(mx, row[j]);
    }
    double sum = 0.0;
    for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j) sum += std::exp(row[j] - mx);
    lse[i] = mx + std::log(sum);
    for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j) row[j] = std::exp(row[j] - lse[i]);
  }
}

}  // namespace

void attention_forward_ref(View<double> o, View<double> lse, View<const double> q,
                           View<const double> k, View<const double> v, int64_t batch,
                           int64_t n_heads, int64_t n_kv_heads, AttnMask mask) {
  RefShape s = check_ref_shapes(q, k, v, batch, n_heads, n_kv_heads);
  s.causal = mask.causal;
  s.key_start = mask.key_start.data();
  MEMO_CHECK(mask.key_start.empty() || mask.key_start.numel() == batch * s.S,
             "attention_ref: key_start ", mask.key_start.shape(), " for ", batch * s.S, " rows");
  MEMO_CHECK(same_shape(o, q) && lse.shape() == Shape({batch, n_heads, s.S}),
             "attention_forward_ref: o ", o.shape(), " lse ", lse.shape());
  std::vector<double> p, row_lse;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < n_heads; ++h) {
      ref_probs(p, row_lse, q, k, s, b, h);
      const int64_t hk = h / s.G;
      for (int64_t i = 0; i < s.S; ++i) {
        lse(b, h, i) = row_lse[i];
        for (int64_t d = 0; d < s.D; ++d) {
          double acc = 0.0;
          for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j)
            acc += p[i * s.S + j] * v(b * s.S + j, hk * s.D + d);
          o(b * s.S + i, h * s.D + d) = acc;
        }
      }
    }
}

void attention_backward_ref(View<double> dq, View<double> dk, View<double> dv,
                            View<const double> dout, View<const double> q, View<const double> k,
                            View<const double> v, int64_t batch, int64_t n_heads,
                            int64_t n_kv_heads, AttnMask mask) {
  RefShape s = check_ref_shapes(q, k, v, batch, n_heads, n_kv_heads);
  s.causal = mask.causal;
  s.key_start = mask.key_start.data();
  MEMO_CHECK(mask.key_start.empty() || mask.key_start.numel() == batch * s.S,
             "attention_ref: key_start ", mask.key_start.shape(), " for ", batch * s.S, " rows");
  MEMO_CHECK(same_shape(dq, q) && same_shape(dout, q) && same_shape(dk, k) && same_shape(dv, v),
             "attention_backward_ref: dq ", dq.shape(), " dout ", dout.shape(), " dk ", dk.shape(),
             " dv ", dv.shape());
  const double scale = 1.0 / std::sqrt(double(s.D));
  for (int64_t t = 0; t < dq.rows(); ++t)
    for (int64_t c = 0; c < dq.cols(); ++c) dq(t, c) = 0.0;
  for (int64_t t = 0; t < dk.rows(); ++t)
    for (int64_t c = 0; c < dk.cols(); ++c) dk(t, c) = dv(t, c) = 0.0;
  std::vector<double> p, row_lse, dp(s.S);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < n_heads; ++h) {
      ref_probs(p, row_lse, q, k, s, b, h);
      const int64_t hk = h / s.G;
      const int64_t r0 = b * s.S;
      for (int64_t i = 0; i < s.S; ++i) {
        double row_dot = 0.0;  // sum_j p_ij dp_ij
        for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j) {
          dp[j] = 0.0;
          for (int64_t d = 0; d < s.D; ++d)
            dp[j] += dout(r0 + i, h * s.D + d) * v(r0 + j, hk * s.D + d);
          row_dot += p[i * s.S + j] * dp[j];
        }
        for (int64_t j = s.first_key(b, i); j <= s.last_key(i); ++j) {
          const double pij = p[i * s.S + j];
          const double ds = pij * (dp[j] - row_dot);
          for (int64_t d = 0; d < s.D; ++d) {
            dv(r0 + j, hk * s.D + d) += pij * dout(r0 + i, h * s.D + d);
            dq(r0 + i, h * s.D + d) += ds * k(r0 + j, hk * s.D + d) * scale;
            dk(r0 + j, hk * s.D + d) += ds * q(r0 + i, h * s.D + d) * scale;
          }
        }
      }
    }
}

}  // namespace memo::cpu
