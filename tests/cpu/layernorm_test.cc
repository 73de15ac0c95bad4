// LayerNorm: fp32 kernel vs the float64 reference (including rows whose mean dwarfs their spread),
// the reference backward vs finite differences, thread-count independence and shape checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

constexpr float kEps = 1e-5f;

// Row shapes of the kernel tests: the shared awkward set plus the 5-row cases the brief names.
std::vector<test::RowShape> layernorm_shapes() {
  std::vector<test::RowShape> shapes = test::awkward_shapes();
  for (int64_t C : {1, 7, 13, 97}) shapes.push_back({5, C});
  return shapes;
}

TEST(LayerNormForward, matches_float64_reference_on_awkward_shapes_and_magnitudes) {
  // Magnitudes from 1e-18 (eps dominates the variance) to 1e18 (x^2 = 1e36 would overflow a float
  // sum); offset 1e3: every row's mean is 1e3 times its spread, where x - mean in float would
  // cancel.
  for (auto [magnitude, offset] :
       {std::pair{1.0f, 0.0f}, {1e-18f, 0.0f}, {1e18f, 0.0f}, {1.0f, 1e3f}}) {
    for (auto [T, C] : layernorm_shapes()) {
      std::vector<float> x = test::random_floats(T * C, 40), w = test::random_floats(C, 41),
                         b = test::random_floats(C, 42);
      for (float& v : x) v = v * magnitude + offset;
      std::vector<float> y(T * C), mean(T), rstd(T);
      layernorm_forward(Tensor(y.data(), {T, C}), Tensor(mean.data(), {T}),
                        Tensor(rstd.data(), {T}), ConstTensor(x.data(), {T, C}),
                        ConstTensor(w.data(), {C}), ConstTensor(b.data(), {C}), kEps);
      const std::vector<double> xd = test::to_double(x), wd = test::to_double(w),
                                bd = test::to_double(b);
      std::vector<double> yd(T * C), md(T), rd(T), y_scale(T * C), m_scale(T);
      layernorm_forward_ref(TensorF64(yd.data(), {T, C}), TensorF64(md.data(), {T}),
                            TensorF64(rd.data(), {T}), ConstTensorF64(xd.data(), {T, C}),
                            ConstTensorF64(wd.data(), {C}), ConstTensorF64(bd.data(), {C}),
                            double(kEps));
      for (int64_t t = 0; t < T; ++t) {
        double max_abs = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = t * C + c;
          max_abs = std::max(max_abs, std::abs(xd[i]));
          y_scale[i] = std::abs((xd[i] - md[t]) * rd[t] * wd[c]) + std::abs(bd[c]);
        }
        // The two double sums may differ by ~C 2^-53 max|x|, which dwarfs a mean near 0.
        m_scale[t] = std::abs(md[t]) + 1e-12 * max_abs;
      }
      // mean, rstd: double computations rounded once to float (<= u).
      EXPECT_LE(test::max_scaled_err(mean, md, m_scale), 1.0 * kFloatU) << T << "x" << C;
      EXPECT_LE(test::max_rel_err(rstd, rd), 1.0 * kFloatU) << T << "x" << C;
      // y = float(xhat) * w + b: three roundings, each <= u of a term bounded by the scale; 4u
      // leaves room for the double sums (~C 1e-16).
      EXPECT_LE(test::max_scaled_err(y, yd, y_scale), 4.0 * kFloatU)
          << T << "x" << C << " mag " << magnitude << " offset " << offset;
    }
  }
}

TEST(LayerNormBackward, matches_float64_reference_and_accumulates_into_dx_dw_db) {
  for (float magnitude : {1.0f, 1e-18f, 1e18f}) {
    for (auto [T, C] : layernorm_shapes()) {
      std::vector<float> x = test::random_floats(T * C, 43), w = test::random_floats(C, 44),
                         b = test::random_floats(C, 45), dy = test::random_floats(T * C, 46),
                         dx = test::random_floats(T * C, 47), dw = test::random_floats(C, 48),
                         db = test::random_floats(C, 49), y(T * C), mean(T), rstd(T);
      for (float& v : x) v *= magnitude;
      layernorm_forward(Tensor(y.data(), {T, C}), Tensor(mean.data(), {T}),
                        Tensor(rstd.data(), {T}), ConstTensor(x.data(), {T, C}),
                        ConstTensor(w.data(), {C}), ConstTensor(b.data(), {C}), kEps);
      // The reference starts from the same dx, dw, db and takes the same fp32 mean and rstd, so
      // only the backward's arithmetic is compared.
      std::vector<double> xd = test::to_double(x), wd = test::to_double(w),
                          dyd = test::to_double(dy), dxd = test::to_double(dx),
                          dwd = test::to_double(dw), dbd = test::to_double(db),
                          md = test::to_double(mean), rd = test::to_double(rstd);
      // Per-element magnitudes: the sum of the absolute values of the terms each result adds.
      std::vector<double> dx_scale(T * C), dw_scale(C), db_scale(C);
      for (int64_t c = 0; c < C; ++c) {
        dw_scale[c] = std::abs(dwd[c]);
        db_scale[c] = std::abs(dbd[c]);
      }
      for (int64_t t = 0; t < T; ++t) {
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = t * C + c;
          sum_g += wd[c] * dyd[i];
          sum_gx += wd[c] * dyd[i] * (xd[i] - md[t]) * rd[t];
        }
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = t * C + c;
          const double xhat = (xd[i] - md[t]) * rd[t];
          dx_scale[i] = std::abs(dxd[i]) + rd[t] * (std::abs(wd[c] * dyd[i]) + std::abs(sum_g / C) +
                                                    std::abs(xhat * sum_gx / C));
          dw_scale[c] += std::abs(dyd[i] * xhat);
          db_scale[c] += std::abs(dyd[i]);
        }
      }
      layernorm_backward(Tensor(dx.data(), {T, C}), Tensor(dw.data(), {C}), Tensor(db.data(), {C}),
                         ConstTensor(dy.data(), {T, C}), ConstTensor(x.data(), {T, C}),
                         ConstTensor(w.data(), {C}), ConstTensor(mean.data(), {T}),
                         ConstTensor(rstd.data(), {T}));
      layernorm_backward_ref(TensorF64(dxd.data(), {T, C}), TensorF64(dwd.data(), {C}),
                             TensorF64(dbd.data(), {C}), ConstTensorF64(dyd.data(), {T, C}),
                             ConstTensorF64(xd.data(), {T, C}), ConstTensorF64(wd.data(), {C}),
                             ConstTensorF64(md.data(), {T}), ConstTensorF64(rd.data(), {T}));
      // dx, dw, db are computed in double and rounded once (<= u of the result); 2u leaves room
      // for the double arithmetic (~C 1e-16 of the scale).
      EXPECT_LE(test::max_scaled_err(dx, dxd, dx_scale), 2.0 * kFloatU) << T << "x" << C;
      EXPECT_LE(test::max_scaled_err(dw, dwd, dw_scale), 2.0 * kFloatU) << T << "x" << C;
      EXPECT_LE(test::max_scaled_err(db, dbd, db_scale), 2.0 * kFloatU) << T << "x" << C;
    }
  }
}

TEST(LayerNormBackward, reference_gradients_match_finite_differences) {
  const int64_t T = 3, C = 7;
  const double eps = 1e-5;
  const std::vector<double> x0 = test::to_double(test::random_floats(T * C, 50)),
                            w0 = test::to_double(test::random_floats(C, 51)),
                            b0 = test::to_double(test::random_floats(C, 52)),
                            probe = test::to_double(test::random_floats(T * C, 53));
  // L(x, w, b) = sum y * probe, so dL/dy = probe.
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b) {
    std::vector<double> y(T * C), m(T), r(T);
    layernorm_forward_ref(TensorF64(y.data(), {T, C}), TensorF64(m.data(), {T}),
                          TensorF64(r.data(), {T}), ConstTensorF64(x.data(), {T, C}),
                          ConstTensorF64(w.data(), {C}), ConstTensorF64(b.data(), {C}), eps);
    return test::dot(y, probe);
  };
  std::vector<double> y(T * C), m(T), r(T), dx(T * C), dw(C), db(C);
  layernorm_forward_ref(TensorF64(y.data(), {T, C}), TensorF64(m.data(), {T}),
                        TensorF64(r.data(), {T}), ConstTensorF64(x0.data(), {T, C}),
                        ConstTensorF64(w0.data(), {C}), ConstTensorF64(b0.data(), {C}), eps);
  layernorm_backward_ref(TensorF64(dx.data(), {T, C}), TensorF64(dw.data(), {C}),
                         TensorF64(db.data(), {C}), ConstTensorF64(probe.data(), {T, C}),
                         ConstTensorF64(x0.data(), {T, C}), ConstTensorF64(w0.data(), {C}),
                         ConstTensorF64(m.data(), {T}), ConstTensorF64(r.data(), {T}));
  const auto fd_x = test::finite_diff_grad(x0, [&](const auto& x) { return loss(x, w0, b0); });
  const auto fd_w = test::finite_diff_grad(w0, [&](const auto& w) { return loss(x0, w, b0); });
  const auto fd_b = test::finite_diff_grad(b0, [&](const auto& b) { return loss(x0, w0, b); });
  // Finite differences are good to ~1e-9 here (see finite_diff_grad); 1e-7 fails any wrong term.
  EXPECT_LE(test::max_grad_err(dx, fd_x), 1e-7);
  EXPECT_LE(test::max_grad_err(dw, fd_w), 1e-7);
  EXPECT_LE(test::max_grad_err(db, fd_b), 1e-7);
}

TEST(LayerNorm, gives_the_same_bits_on_one_and_two_threads) {
  const int64_t T = 67, C = 257;  // above the parallel threshold; 3 column blocks for dw, db
  const std::vector<float> x = test::random_floats(T * C, 54), w = test::random_floats(C, 55),
                           b = test::random_floats(C, 56), dy = test::random_floats(T * C, 57);
  auto run = [&](int threads) {
    std::vector<float> out(2 * T * C + 2 * T + 2 * C, 0.0f);
    float* p = out.data();
    Tensor y(p, {T, C}), mean(p + T * C, {T}), rstd(p + T * C + T, {T}),
        dx(p + T * C + 2 * T, {T, C}), dw(p + 2 * T * C + 2 * T, {C}),
        db(p + 2 * T * C + 2 * T + C, {C});
    test::with_threads(threads, [&] {
      layernorm_forward(y, mean, rstd, ConstTensor(x.data(), {T, C}), ConstTensor(w.data(), {C}),
                        ConstTensor(b.data(), {C}), kEps);
      layernorm_backward(dx, dw, db, ConstTensor(dy.data(), {T, C}), ConstTensor(x.data(), {T, C}),
                         ConstTensor(w.data(), {C}), mean, rstd);
    });
    return out;
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(2), run(2));
}

TEST(LayerNorm, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  Tensor x(buf.data(), {4, 8}), y(buf.data(), {4, 7}), r(buf.data(), {4}), w(buf.data(), {8});
  EXPECT_THROW(layernorm_forward(y, r, r, x, w, w, kEps), Error);
  EXPECT_THROW(layernorm_forward(x, r, r, x, w, Tensor(buf.data(), {7}), kEps), Error);
  EXPECT_THROW(layernorm_forward(x, r, r, x, w, w, -1.0f), Error);
  EXPECT_THROW(layernorm_backward(x, w, w, x, x, w, r, Tensor(buf.data(), {3})), Error);
  EXPECT_THROW(layernorm_backward(x, w, Tensor(buf.data(), {7}), x, x, w, r, r), Error);
}

}  // namespace
}  // namespace memo::cpu
