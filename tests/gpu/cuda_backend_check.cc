// The CUDA backend against the CPU backend, kernel by kernel, in fp32, on the same random inputs;
// then the streams (copies ordered by events under random delays) and run-to-run determinism.
// Each test skips, saying so, where no CUDA GPU can be used (CI builds and runs this binary
// there); scripts/gpu-check.sh runs it on a GPU. The kernels' arithmetic is tested without a GPU
// by tests/cuda/bodies_test.cc.
#include <cublas_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/conformance.h"
#include "memo/backend/bf16_storage.h"
#include "memo/backend/raw_allocator.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cuda/cuda_backend.h"

namespace memo {
namespace {

std::string g_reason;  // why there is no GPU backend

Backend* gpu() {
  static std::unique_ptr<Backend> backend;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      backend = make_cuda_backend(0);
      std::printf("cuda backend: %s\n", backend->describe().c_str());
    } catch (const ConfigError& e) {
      g_reason = e.what();
    }
  }
  return backend.get();
}

// The conformance suite (tests/backend/conformance.h) on CUDA: within its stated tolerance of the
// CPU (f32 sums in cuBLASLt's and the bodies' orders); skipped without a GPU.
const bool kConformance = test::register_conformance_backend({"cuda",
                                                              []() -> std::unique_ptr<Backend> {
                                                                try {
                                                                  return make_cuda_backend(0);
                                                                } catch (const ConfigError&) {
                                                                  return nullptr;
                                                                }
                                                              },
                                                              test::Promise::kTolerance});

#define REQUIRE_GPU()                                                         \
  Backend* const g = gpu();                                                   \
  if (!g)                                                                     \
  GTEST_SKIP() << g_reason                                                    \
               << ": skipped (tests/cuda/bodies_test.cc checks the kernels' " \
                  "arithmetic on the CPU)"

std::vector<float> randoms(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// One operand of a comparison: its initial values and shape.
struct Buf {
  std::vector<float> values;
  Shape shape;
};
Buf rnd(Shape shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return {randoms(shape.numel(), seed, lo, hi), shape};
}
Buf zeros(Shape shape) { return {std::vector<float>(size_t(shape.numel()), 0.0f), shape}; }

using Op = std::function<double(Backend&, std::vector<Tensor>&)>;

// Runs `op` on the CPU backend over host copies of `bufs` and on the CUDA backend over device
// copies, then compares every buffer afterwards and the returned scalar: max |gpu - cpu| over
// max |cpu| (per buffer) within `tol`. Returns the GPU's buffers.
// Buffers listed in `scratch` are not compared (each backend's own working memory).
std::vector<std::vector<float>> compare(Backend& g, const std::vector<Buf>& bufs, const Op& op,
                                        double tol, std::vector<size_t> scratch = {}) {
  std::vector<std::vector<float>> cpu_vals;
  std::vector<Tensor> cpu_t;
  for (const Buf& b : bufs) cpu_vals.push_back(b.values);
  for (size_t i = 0; i < bufs.size(); ++i)
    cpu_t.emplace_back(View<float>(cpu_vals[i].data(), bufs[i].shape));
  const double cpu_r = op(cpu_backend(), cpu_t);

  std::vector<RawBuffer> dev;
  std::vector<Tensor> gpu_t;
  for (const Buf& b : bufs) {
    dev.emplace_back(g.allocator(g.device_space()), std::max<int64_t>(1, b.shape.numel()) * 4,
                     "test");
    g.copy_from_host(dev.back().data(), b.values.data(), b.shape.numel() * 4);
    gpu_t.emplace_back(dev.back().tensor(b.shape, DType::kF32));
  }
  const double gpu_r = op(g, gpu_t);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < bufs.size(); ++i) {
    out.emplace_back(size_t(bufs[i].shape.numel()));
    g.copy_to_host(out.back().data(), dev[i].data(), bufs[i].shape.numel() * 4);
    if (std::find(scratch.begin(), scratch.end(), i) != scratch.end()) continue;
    double err = 0.0, mag = 0.0;
    for (size_t j = 0; j < out.back().size(); ++j) {
      EXPECT_FALSE(std::isnan(out.back()[j]) && !std::isnan(cpu_vals[i][j]))
          << "buffer " << i << " element " << j;
      err = std::max(err, double(std::abs(out.back()[j] - cpu_vals[i][j])));
      mag = std::max(mag, double(std::abs(cpu_vals[i][j])));
    }
    EXPECT_LE(err, tol * std::max(mag, 1e-30))
        << "buffer " << i << ": max error " << err << " against max |cpu| " << mag;
  }
  EXPECT_LE(std::abs(gpu_r - cpu_r), tol * std::max(std::abs(cpu_r), 1e-30))
      << "returned " << gpu_r << ", cpu " << cpu_r;
  return out;
}

constexpr double kTol = 2e-6;     // elementwise and row kernels: a few ulp (expf differs)
constexpr double kSumTol = 1e-5;  // products and attention: other summation orders

TEST(CudaBackend, matmul_all_transposes_alpha_beta_and_a_column_slice) {
  REQUIRE_GPU();
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t M = 70, N = 45, K = 129;
      compare(
          *g,
          {rnd(ta ? Shape{K, M} : Shape{M, K}, 1), rnd(tb ? Shape{N, K} : Shape{K, N}, 2),
           rnd({M, N}, 3)},
          [&](Backend& b, std::vector<Tensor>& t) {
            b.matmul(t[2], t[0], t[1], ta, tb, 0.75f, 0.5f);
            return 0.0;
          },
          kSumTol);
    }
  // c = a @ w[:, 3:35]^T-free slice: a column slice of a wider weight (GPT-2's fused qkv)
  compare(
      *g, {rnd({300, 64}, 4), rnd({64, 100}, 5), rnd({300, 32}, 6)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.matmul_token_panels_kn(t[2], t[0], t[1].slice_cols(3, 35), 0.0f);
        return 0.0;
      },
      kSumTol);
}

TEST(CudaBackend, token_panels_rebuild_rows_from_a_panel_start_bit_for_bit) {
  REQUIRE_GPU();
  const int64_t T = 3 * kCudaPanelRows + 77, K = 96, N = 160;
  auto out = compare(
      *g, {rnd({T, K}, 7), rnd({N, K}, 8), zeros({T, N})},
      [](Backend& b, std::vector<Tensor>& t) {
        b.matmul_token_panels(t[2], t[0], t[1], 0.0f);
        return 0.0;
      },
      kSumTol);
  // the rows from panel 1 on, recomputed alone, equal the full product's
  const int64_t r0 = kCudaPanelRows;
  auto part = compare(
      *g, {rnd({T, K}, 7), rnd({N, K}, 8), zeros({T, N})},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.matmul_token_panels(t[2].slice_rows(r0, T), t[0].slice_rows(r0, T), t[1], 0.0f);
        return 0.0;
      },
      kSumTol);
  EXPECT_EQ(0,
            std::memcmp(out[2].data() + r0 * N, part[2].data() + r0 * N, size_t((T - r0) * N) * 4));
}

// Rows of 200 columns (a lane a column) and of 2,051 (lanes over several columns each, Note [Row
// lanes]).
TEST(CudaBackend, norms_forward_and_backward) {
  REQUIRE_GPU();
  const int64_t T = 97;
  for (const int64_t C : {int64_t(200), int64_t(2051)}) {
    SCOPED_TRACE(C);
    compare(
        *g, {zeros({T, C}), zeros({T}), rnd({T, C}, 1), rnd({C}, 2, 0.5f, 1.5f)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f);
          return 0.0;
        },
        kTol);
    std::vector<float> inv(static_cast<size_t>(T));
    {
      std::vector<float> x = randoms(T * C, 1), y(size_t(T * C)), w = randoms(C, 2, 0.5f, 1.5f);
      cpu_backend().rmsnorm_forward(View<float>(y.data(), {T, C}), View<float>(inv.data(), {T}),
                                    View<float>(x.data(), {T, C}), View<float>(w.data(), {C}),
                                    1e-5f);
    }
    compare(
        *g,
        {rnd({T, C}, 9), rnd({C}, 10), rnd({T, C}, 11), rnd({T, C}, 1), rnd({C}, 2, 0.5f, 1.5f),
         Buf{inv, {T}}},
        [](Backend& b, std::vector<Tensor>& t) {
          b.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]);
          return 0.0;
        },
        kTol);
    // y, mean, rstd, x (mean far from 0), w, b, then dx, dw, db, dy
    compare(
        *g,
        {zeros({T, C}), zeros({T}), zeros({T}), rnd({T, C}, 1, 2.0f, 3.0f), rnd({C}, 2),
         rnd({C}, 3), rnd({T, C}, 4), rnd({C}, 5), rnd({C}, 6), rnd({T, C}, 7)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
          b.layernorm_backward(t[6], t[7], t[8], t[9], t[3], t[4], t[1], t[2]);
          return 0.0;
        },
        kTol);
  }
}

TEST(CudaBackend, elementwise_kernels) {
  REQUIRE_GPU();
  const int64_t T = 131, F = 96, H = 4, D = 24, S = 64;
  compare(
      *g, {zeros({S, D / 2}), zeros({S, D / 2}), rnd({T, H * D}, 1), rnd({T, H * D}, 2)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.rope_table(t[0], t[1], rope_inv_freq(D, 10000.0));
        b.rope_forward(t[2], t[0], t[1], D, 5);
        b.rope_backward(t[3], t[0], t[1], D, 0);
        return 0.0;
      },
      kTol);
  compare(
      *g,
      {zeros({T, F}), rnd({T, F}, 3, -8.0f, 8.0f), rnd({T, F}, 4), rnd({T, F}, 5), zeros({T, F}),
       zeros({T, F})},
      [](Backend& b, std::vector<Tensor>& t) {
        b.swiglu_forward(t[0], t[1], t[2]);
        b.swiglu_backward(t[4], t[5], t[3], t[1], t[2]);
        b.gelu_forward(t[0], t[1]);
        b.gelu_backward(t[3], t[3], t[1]);
        return 0.0;
      },
      kTol);
  compare(
      *g, {rnd({T, F}, 6), rnd({F}, 7), rnd({F}, 8), rnd({T, F}, 9)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.bias_add(t[0], t[1]);
        b.bias_backward(t[2], t[0]);
        b.add_into(t[3], t[0]);
        b.scale(t[3], 0.5f);
        b.copy(t[0].slice_cols(1, 9), t[3].slice_cols(20, 28));
        b.fill(t[0].slice_rows(3, 5), 2.5f);
        return b.sum(t[3]) + 1e3 * b.sum_squares(t[0].slice_rows(0, 50));
      },
      kTol);
}

// copy and add_into take any two contiguous views of one element count (as on the CPU), and
// strided views of one shape; a 1-D view is one long row.
TEST(CudaBackend, copy_and_add_into_between_shapes_of_one_size) {
  REQUIRE_GPU();
  compare(
      *g, {rnd({6, 4}, 1), rnd({4, 6}, 2), rnd({24}, 3), rnd({8, 10}, 4)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.copy(t[0], t[1]);
        b.add_into(t[2], t[1]);
        b.add_into(t[3].slice_rows(0, 3), t[3].slice_rows(4, 7));  // parts of one buffer
        b.copy(t[1], t[2]);
        return 0.0;
      },
      kTol);
}

TEST(CudaBackend, embedding_and_cross_entropy) {
  REQUIRE_GPU();
  const int64_t T = 150, C = 40, V = 333;
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = int32_t((t * 37) % 50);  // repeats
  const View<const int32_t> tok(ids.data(), {T});
  compare(
      *g, {zeros({T, C}), rnd({V, C}, 1), rnd({T, C}, 2), rnd({V, C}, 3)},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.embedding_forward(t[0], tok, t[1]);
        b.embedding_backward(t[3], t[2], tok);
        return 0.0;
      },
      kTol);
  for (const int64_t vocab : {V, int64_t(5003)})  // a lane a column or so; lanes over ~20 each
    compare(
        *g, {zeros({T}), zeros({T, vocab}), rnd({T, vocab}, 4, -6.0f, 6.0f), zeros({T})},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.cross_entropy(t[0], t[1], t[2], tok, 0.01f);
          b.cross_entropy(t[3], Tensor(), t[2], tok, 1.0f);
          b.cross_entropy(t[3], t[2], t[2], tok, 0.5f);  // dlogits aliasing logits
          return 0.0;
        },
        kTol);
}

// Attention forward, then backward from its o and lse, on both backends: q and k uniform in
// [-qk_range, qk_range], v and dout in [-1, 1] (seeds from `seed`), each backend's own scratch.
void compare_attention(Backend* g, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D,
                       AttnMask mask, uint64_t seed, float qk_range) {
  const int64_t fs = std::max(cpu_backend().attention_forward_scratch_numel(S, D, H, Hkv),
                              g->attention_forward_scratch_numel(S, D, H, Hkv));
  const int64_t bs = std::max(cpu_backend().attention_backward_scratch_numel(S, D, H, Hkv),
                              g->attention_backward_scratch_numel(S, D, H, Hkv));
  compare(*g,
          {rnd({B * S, H * D}, seed, -qk_range, qk_range),
           rnd({B * S, Hkv * D}, seed + 1, -qk_range, qk_range), rnd({B * S, Hkv * D}, seed + 2),
           zeros({B * S, H * D}), zeros({B, H, S}), zeros({fs}), rnd({B * S, H * D}, seed + 3),
           zeros({B * S, H * D}), zeros({B * S, Hkv * D}), zeros({B * S, Hkv * D}), zeros({bs})},
          [&](Backend& b, std::vector<Tensor>& t) {
            b.attention_forward(t[3], t[4], t[0], t[1], t[2], B, H, Hkv, t[5], mask);
            b.attention_backward(t[7], t[8], t[9], t[6], t[0], t[1], t[2], t[3], t[4], B, H, Hkv,
                                 t[10], mask);
            return 0.0;
          },
          kSumTol, {5, 10});
}

TEST(CudaBackend, attention_forward_backward_merge_and_decode) {
  REQUIRE_GPU();
  for (const auto& [D, mask] : {std::pair{64L, AttnMask::kCausal}, std::pair{16L, AttnMask::kFull},
                                std::pair{128L, AttnMask::kCausal}}) {
    compare_attention(g, 2, 75, 4, 2, D, mask, 1, 1.0f);
  }
  // merge: two halves of the keys merge into the whole (values checked against the CPU merge)
  const int64_t B = 1, S = 33, H = 2, D = 8;
  compare(
      *g, {rnd({B * S, H * D}, 5), rnd({B, H, S}, 6), rnd({B * S, H * D}, 7), rnd({B, H, S}, 8)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.attention_merge(t[0], t[1], t[2], t[3]);
        return 0.0;
      },
      kTol);
  const int64_t first = 40, n = 3, Hkv = 1;
  compare(*g,
          {zeros({n, H * D}), rnd({n, H * D}, 9), rnd({first + n, Hkv * D}, 10),
           rnd({first + n, Hkv * D}, 11),
           zeros({cpu_backend().attention_decode_scratch_numel(first + n)})},
          [&](Backend& b, std::vector<Tensor>& t) {
            b.attention_decode(t[0], t[1], t[2], t[3], first, H, Hkv, t[4]);
            return 0.0;
          },
          kSumTol, {4});
}

TEST(CudaBackend, optimiser_updates_and_the_noise_probe) {
  REQUIRE_GPU();
  const int64_t n = 40000;
  AdamStep adam{
      0.9f, 0.95f, 1e-8f, 1e-3f, 0.3f, 0.01f, 0.999f, float(1.0 - 0.9), float(1.0 - 0.95)};
  compare(
      *g, {rnd({n}, 1), rnd({n}, 2), rnd({n}, 3, 0.0f, 1.0f), rnd({n}, 4)},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.adamw_update(t[0], t[1], t[2], t[3], adam);
        b.adam_update(t[0], t[1], t[2], t[3], adam);
        b.sgd_update(t[0], t[1], t[3], SgdStep{0.01f, 0.1f, 0.9f, 0.9f, true, false});
        b.sgd_update(t[0], Tensor(), t[3], SgdStep{0.01f, 0.1f, 0.0f, 1.0f, false, false});
        b.adagrad_update(t[0], t[2], t[3], AdagradStep{0.01f, 1e-10f, 0.1f});
        b.rmsprop_update(t[0], t[2], Tensor(), t[1], t[3],
                         RmspropStep{0.01f, 0.99f, 1e-8f, 0.9f, 0.0f, false, float(1.0 - 0.99)});
        return 0.0;
      },
      kTol);
  // Centered RMSprop from its true start (zero state), so that v - ga^2 stays well away from 0:
  // from arbitrary random state 1/sqrt(v - ga^2) amplifies a rounding difference without bound
  // (the first GPU run of this test, with such state, differed by 2e-4 relative).
  compare(
      *g, {rnd({n}, 1), zeros({n}), zeros({n}), zeros({n}), rnd({n}, 4)},
      [&](Backend& b, std::vector<Tensor>& t) {
        for (int step = 0; step < 3; ++step)
          b.rmsprop_update(t[0], t[1], t[2], t[3], t[4],
                           RmspropStep{0.01f, 0.99f, 1e-8f, 0.9f, 0.1f, true, float(1.0 - 0.99)});
        return 0.0;
      },
      kTol);
  // Sign updates: a moment within rounding of 0 may take either sign (a whole lr apart), so these
  // see moments that start at 0 and gradients away from 0; tests/cuda/bodies_test.cc checks the
  // momentum arithmetic bit for bit.
  std::vector<float> away = randoms(n, 5, 0.1f, 1.0f);
  for (int64_t j = 0; j < n; j += 2) away[size_t(j)] = -away[size_t(j)];
  compare(
      *g, {rnd({n}, 6), zeros({n}), Buf{away, {n}}},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.signsgd_update(t[0], Tensor(), t[2], SignSgdStep{0.01f, 0.99f, 0.0f});
        b.signsgd_update(t[0], t[1], t[2], SignSgdStep{0.01f, 0.99f, 0.9f, float(1.0 - 0.9)});
        b.fill(t[1], 0.0f);
        b.lion_update(t[0], t[1], t[2],
                      LionStep{1e-4f, 0.9f, 0.99f, 0.999f, float(1.0 - 0.9), float(1.0 - 0.99)});
        return 0.0;
      },
      kTol);
  const int64_t big = 3 * (int64_t(1) << 14) + 5;
  compare(
      *g, {rnd({big}, 5), zeros({big})},
      [&](Backend& b, std::vector<Tensor>& t) {
        std::vector<double> partial(size_t(b.noise_probe_partial_numel(big)));
        const View<double> pv(partial.data(), {int64_t(partial.size())});
        double s = b.noise_probe_pass(t[0], t[1], NoiseProbePass::kFirst, pv);
        b.scale(t[0], 0.0f);
        b.add_into(t[0], t[1]);
        s += b.noise_probe_pass(t[0], t[1], NoiseProbePass::kMiddle, pv);
        b.add_into(t[0], t[1]);
        s += b.noise_probe_pass(t[0], t[1], NoiseProbePass::kLast, pv);
        return s;
      },
      kTol);
}

TEST(CudaBackend, adafactor_matrix_vector_and_rms) {
  REQUIRE_GPU();
  const int64_t R = 64, C = 48, n = 5000;
  AdafactorStep s;
  s.beta2t = 0.8f;
  s.eps1 = 1e-30f;
  s.alpha = 0.01f;
  s.beta1 = 0.9f;
  s.one_minus_beta2t = float(1.0 - 0.8);
  s.one_minus_beta1 = float(1.0 - 0.9);
  s.keep = 0.999f;
  compare(*g,
          {rnd({R, C}, 1), rnd({R, C}, 2), rnd({R}, 3, 0.1f, 1.0f), rnd({C}, 4, 0.1f, 1.0f),
           rnd({R, C}, 5), zeros({R}), zeros({C}), rnd({n}, 6), rnd({n}, 7),
           rnd({n}, 8, 0.1f, 1.0f), rnd({n}, 9)},
          [&](Backend& b, std::vector<Tensor>& t) {
            const int64_t pn =
                std::max(b.adafactor_partial_numel(R, R * C), b.adafactor_partial_numel(0, n));
            RawBuffer partial(b.allocator(b.device_space()), pn * 8, "adafactor partial");
            const View<double> pv(partial.as<double>(), {pn});
            b.adafactor_update_matrix(t[0], t[1], t[2], t[3], t[4], t[5], t[6], pv, s);
            b.adafactor_update_vector(t[7], t[8], t[9], t[10], pv, s);
            return b.adafactor_rms(t[0], pv);
          },
          kTol, {5, 6});
}

// No GPU needed: cuBLASLt opens at run time (Note [Loading cuBLASLt]) and has every function memo
// calls, in the major version this build was compiled against.
TEST(CudaLibraries, cublaslt_opens_at_run_time_with_every_function_memo_calls) {
  const int64_t version = cublaslt_version();
  EXPECT_GE(version, int64_t(CUBLAS_VER_MAJOR) * 10000);
  EXPECT_LT(version, int64_t(CUBLAS_VER_MAJOR + 1) * 10000);
}

TEST(CudaBackend, convert_to_bf16_and_back_matches_the_cpu_bit_for_bit) {
  REQUIRE_GPU();
  const int64_t n = 100003;
  std::vector<float> x = randoms(n, 21, -1e4f, 1e4f), back(static_cast<size_t>(n)),
                     want(static_cast<size_t>(n));
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = std::numeric_limits<float>::quiet_NaN();
  x[2] = std::numeric_limits<float>::max();  // rounds up to infinity
  RawBuffer f(g->allocator(MemSpace::kDevice), n * 4, "f32"),
      b(g->allocator(MemSpace::kDevice), n * 2, "bf16");
  g->copy_from_host(f.data(), x.data(), n * 4);
  g->convert(b.tensor({n}, DType::kBF16), f.tensor({n}, DType::kF32));
  g->convert(f.tensor({n}, DType::kF32), b.tensor({n}, DType::kBF16));
  g->copy_to_host(back.data(), f.data(), n * 4);
  std::vector<bf16> cb(static_cast<size_t>(n));
  cpu_backend().convert(Tensor(View<bf16>(cb.data(), {n})), View<const float>(x.data(), {n}));
  cpu_backend().convert(View<float>(want.data(), {n}),
                        ConstTensor(View<const bf16>(cb.data(), {n})));
  EXPECT_EQ(0, std::memcmp(back.data(), want.data(), size_t(n) * 4));
  // a host tensor handed to a GPU kernel is refused with its space, not read on the device
  EXPECT_THROW(g->convert(b.tensor({n}, DType::kBF16), View<const float>(x.data(), {n})), Error);
}

// cuBLASLt's bf16 products (Backend::bf16_products): bf16 operands, f32 accumulation, into a
// bf16 result (rounded once; beta = 1 accumulates) and an f32 one, against the CPU's bf16
// storage by conversion (Note [bf16 storage by conversion]) on the same bf16 inputs: within one
// bf16 step of the bf16 result and 1e-5 relative of the f32 one (only the order of the f32 sums
// differs), for a row-major product, a transposed one and a column slice of the weight.
TEST(CudaBackend, bf16_products_match_the_cpus_bf16_storage) {
  REQUIRE_GPU();
  ASSERT_TRUE(g->bf16_products());
  const int64_t M = 300, K = 256, N = 96;
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<bf16> out;
    for (float x : v) out.push_back(float_to_bf16(x));
    return out;
  };
  const std::vector<bf16> a = to_bf16(randoms(M * K, 31)), w = to_bf16(randoms(N * K, 32)),
                          c0 = to_bf16(randoms(M * N, 33));
  RawAllocator& dev = g->allocator(MemSpace::kDevice);
  RawBuffer da(dev, M * K * 2, "a"), dw(dev, N * K * 2, "w"), dc(dev, M * N * 2, "c"),
      df(dev, M * N * 4, "f");
  g->copy_from_host(da.data(), a.data(), M * K * 2);
  g->copy_from_host(dw.data(), w.data(), N * K * 2);
  for (const int64_t cols : {N, N / 2}) {  // the whole weight, then a row slice of it
    SCOPED_TRACE(cols);
    g->copy_from_host(dc.data(), c0.data(), M * N * 2);
    const Tensor C = dc.tensor({M, N}, DType::kBF16).slice_cols(0, cols);
    const ConstTensor A = da.tensor({M, K}, DType::kBF16),
                      W = dw.tensor({N, K}, DType::kBF16).slice_rows(0, cols);
    g->matmul(C, A, W, false, true, 1.0f, 1.0f);
    const Tensor F = df.tensor({K, cols}, DType::kF32);
    g->matmul(F, A.slice_rows(0, K),
              dc.tensor({M, N}, DType::kBF16).slice_rows(0, K).slice_cols(0, cols), true, false,
              1.0f, 0.0f);
    std::vector<bf16> got_c(size_t(M * N));
    std::vector<float> got_f(size_t(K * cols));
    g->copy_to_host(got_c.data(), dc.data(), M * N * 2);
    g->copy_to_host(got_f.data(), df.data(), K * cols * 4);

    Bf16StorageBackend ref(cpu_backend());
    std::vector<bf16> want_c = c0;
    std::vector<float> want_f(size_t(K * cols));
    const View<bf16> Cw(want_c.data(), {M, N});
    ref.matmul(Cw.slice_cols(0, cols), View<const bf16>(a.data(), {M, K}),
               View<const bf16>(w.data(), {cols, K}), false, true, 1.0f, 1.0f);
    // the f32 product reads the GPU's bf16 result, so only its own sums are compared
    const View<bf16> Cg(got_c.data(), {M, N});
    ref.matmul(View<float>(want_f.data(), {K, cols}), View<const bf16>(a.data(), {K, K}),
               ConstTensor(Cg.slice_rows(0, K).slice_cols(0, cols)), true, false, 1.0f, 0.0f);
    int64_t off = 0;  // elements more than a bf16 step apart; the worst, in steps of the result
    double worst_steps = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < got_c.size(); ++i) {
      const float x = bf16_to_float(got_c[i]), y = bf16_to_float(want_c[i]);
      const double steps = std::abs(x - y) / std::ldexp(std::max(std::abs(y), 1e-3f), -8);
      off += steps > 2.0;
      if (steps > worst_steps) worst_steps = steps, worst_at = i;
    }
    EXPECT_EQ(off, 0) << "worst " << worst_steps << " steps at element " << worst_at << ": "
                      << bf16_to_float(got_c[worst_at]) << " against "
                      << bf16_to_float(want_c[worst_at]);
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < got_f.size(); ++i) {
      worst = std::max(worst, double(std::abs(got_f[i] - want_f[i])));
      scale = std::max(scale, double(std::abs(want_f[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale);
  }
}

// bf16 attention (Note [Chunked attention], Note [Flash attention]): the GPU's chunked schedule
// and its fused kernels over bf16 activations against the CPU's bf16 storage (f32 kernels over
// the widened inputs, each output rounded once). Both round P and dS to bf16 before their
// products: within 4u (u = 2^-8) of max(|ref|, 1), the bound tests/cuda/bodies_test.cc derives
// (kAttnBf16Tol; measured there: 0.9u chunked, and tests/cuda/flash_attention_test.cc for the
// fused kernels).
void check_bf16_attention(Backend* g, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t rows,
                          bool flash = false, int64_t D = 64, AttnMask mask = AttnMask::kCausal) {
  SCOPED_TRACE(str("B ", B, " S ", S, " H ", H, " Hkv ", Hkv, " D ", D,
                   flash ? " flash" : str(" chunked, rows ", rows),
                   mask.causal ? " causal" : " full",
                   mask.key_start.empty() ? "" : " with key_start"));
  set_cuda_attention_chunk_rows(*g, rows);
  set_cuda_flash_attention(*g, flash);
  const int64_t T = B * S;
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<bf16> out;
    for (float x : v) out.push_back(float_to_bf16(x));
    return out;
  };
  const std::vector<bf16> q = to_bf16(randoms(T * H * D, 41, -2.0f, 2.0f)),
                          k = to_bf16(randoms(T * Hkv * D, 42, -2.0f, 2.0f)),
                          v = to_bf16(randoms(T * Hkv * D, 43)),
                          dout = to_bf16(randoms(T * H * D, 44));
  // the CPU reference: forward, then backward from its own o and lse
  Bf16StorageBackend ref(cpu_backend());
  std::vector<bf16> o(T * H * D), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
  std::vector<float> lse(B * H * S),
      scratch(size_t(std::max(ref.attention_forward_scratch_numel(S, D, H, Hkv),
                              ref.attention_backward_scratch_numel(S, D, H, Hkv))));
  auto cq = [&](const std::vector<bf16>& x, int64_t cols) {
    return View<const bf16>(x.data(), {T, cols});
  };
  const Tensor sc = View<float>(scratch.data(), {int64_t(scratch.size())});
  ref.attention_forward(View<bf16>(o.data(), {T, H * D}), View<float>(lse.data(), {B, H, S}),
                        cq(q, H * D), cq(k, Hkv * D), cq(v, Hkv * D), B, H, Hkv, sc, mask);
  ref.attention_backward(View<bf16>(dq.data(), {T, H * D}), View<bf16>(dk.data(), {T, Hkv * D}),
                         View<bf16>(dv.data(), {T, Hkv * D}), cq(dout, H * D), cq(q, H * D),
                         cq(k, Hkv * D), cq(v, Hkv * D), cq(o, H * D),
                         View<const float>(lse.data(), {B, H, S}), B, H, Hkv, sc, mask);
  // the GPU: forward, and backward from the CPU's o and lse
  RawAllocator& dev = g->allocator(MemSpace::kDevice);
  auto up = [&](const void* host, int64_t bytes) {
    RawBuffer b(dev, bytes, "test");
    g->copy_from_host(b.data(), host, bytes);
    return b;
  };
  const int64_t QB = T * H * D * 2, KB = T * Hkv * D * 2;
  RawBuffer gq = up(q.data(), QB), gk = up(k.data(), KB), gv = up(v.data(), KB),
            gdo = up(dout.data(), QB), go_ref = up(o.data(), QB),
            glse_ref = up(lse.data(), B * H * S * 4), go(dev, QB, "o"),
            glse(dev, B * H * S * 4, "lse"), gdq(dev, QB, "dq"), gdk(dev, KB, "dk"),
            gdv(dev, KB, "dv"),
            gsc(dev,
                std::max(g->attention_forward_scratch_numel(S, D, H, Hkv),
                         g->attention_backward_scratch_numel(S, D, H, Hkv)) *
                    4,
                "scratch");
  const Tensor gscratch = gsc.tensor({int64_t(gsc.bytes() / 4)}, DType::kF32);
  auto qt = [&](RawBuffer& b, int64_t cols) { return b.tensor({T, cols}, DType::kBF16); };
  auto run = [&] {
    g->attention_forward(qt(go, H * D), glse.tensor({B, H, S}, DType::kF32), qt(gq, H * D),
                         qt(gk, Hkv * D), qt(gv, Hkv * D), B, H, Hkv, gscratch, mask);
    g->attention_backward(qt(gdq, H * D), qt(gdk, Hkv * D), qt(gdv, Hkv * D), qt(gdo, H * D),
                          qt(gq, H * D), qt(gk, Hkv * D), qt(gv, Hkv * D), qt(go_ref, H * D),
                          glse_ref.tensor({B, H, S}, DType::kF32), B, H, Hkv, gscratch, mask);
  };
  auto down16 = [&](RawBuffer& b, int64_t n) {
    std::vector<bf16> h(static_cast<size_t>(n));
    g->copy_to_host(h.data(), b.data(), n * 2);
    return h;
  };
  run();
  {  // a second run gives the same bits (no atomics, fixed orders)
    const std::vector<bf16> o1 = down16(go, T * H * D), dq1 = down16(gdq, T * H * D),
                            dk1 = down16(gdk, T * Hkv * D), dv1 = down16(gdv, T * Hkv * D);
    run();
    auto same = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
    };
    EXPECT_TRUE(same(o1, down16(go, T * H * D))) << "o repeats";
    EXPECT_TRUE(same(dq1, down16(gdq, T * H * D))) << "dq repeats";
    EXPECT_TRUE(same(dk1, down16(gdk, T * Hkv * D))) << "dk repeats";
    EXPECT_TRUE(same(dv1, down16(gdv, T * Hkv * D))) << "dv repeats";
  }
  std::vector<float> got_lse(B * H * S);
  g->copy_to_host(got_lse.data(), glse.data(), B * H * S * 4);
  double lse_err = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse[i]) || std::isinf(got_lse[i])) {  // a row that sees no key: -inf on both
      EXPECT_EQ(got_lse[i], lse[i]) << "lse " << i;
      continue;
    }
    lse_err =
        std::max(lse_err, double(std::abs(got_lse[i] - lse[i])) / std::max(1.0f, std::abs(lse[i])));
  }
  EXPECT_LE(lse_err, kSumTol) << "lse";
  const double tol = 4.0 / 256.0;
  for (auto& [name, got, want] :
       {std::tuple{"o", down16(go, T * H * D), o}, std::tuple{"dq", down16(gdq, T * H * D), dq},
        std::tuple{"dk", down16(gdk, T * Hkv * D), dk},
        std::tuple{"dv", down16(gdv, T * Hkv * D), dv}}) {
    double err = 0.0, mag = 1.0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float x = bf16_to_float(got[i]), y = bf16_to_float(want[i]);
      ASSERT_FALSE(std::isnan(x)) << name << " " << i;
      err = std::max(err, double(std::abs(x - y)));
      mag = std::max(mag, double(std::abs(y)));
    }
    std::printf("bf16 attention %s: max error %.3g of max(|ref|, 1) %.3g (%.2fu)\n", name, err, mag,
                err / mag * 256.0);
    EXPECT_LE(err, tol * mag) << name;
  }
}

// Puts back the attention a test changed: the fused kernels, chunks sized by the backend.
struct DefaultAttention {
  Backend* b;
  ~DefaultAttention() {
    set_cuda_attention_chunk_rows(*b, 0);
    set_cuda_flash_attention(*b, true);
  }
};

TEST(CudaBackend, bf16_attention_is_within_bf16_rounding_of_the_cpus_bf16_storage) {
  REQUIRE_GPU();
  ASSERT_TRUE(g->bf16_attention());
  const DefaultAttention reset{g};
  // one chunk at 1,500 rows and 32 heads; then 64-row chunks over two sequences (dK and dV
  // accumulate over the chunks in f32 and are rounded once a sequence)
  check_bf16_attention(g, 1, 1500, 32, 8, 0);
  check_bf16_attention(g, 2, 301, 8, 2, 64);
  // the fused kernels: many tiles and a short last one, each head dim, GQA 4 and 1
  check_bf16_attention(g, 1, 1500, 32, 8, 0, true, 64);
  check_bf16_attention(g, 2, 301, 8, 2, 0, true, 128);
  check_bf16_attention(g, 1, 200, 4, 4, 0, true, 128);
  check_bf16_attention(g, 1, 333, 8, 8, 0, true, 32);
  check_bf16_attention(g, 2, 150, 8, 2, 0, true, 64, AttnMask::kFull);  // as ring attention asks
}

// Each query's first key (AttnMask::key_start): packed documents whose starts fall before, on and
// after tile edges; a sliding window wider than a tile; and the full mask of a context-parallel
// pair whose starts run from before the keys to past them. Fused and chunked, against the CPU.
TEST(CudaBackend, bf16_attention_with_documents_and_windows_matches_the_cpus_bf16_storage) {
  REQUIRE_GPU();
  ASSERT_TRUE(g->bf16_attention());
  const DefaultAttention reset{g};
  auto documents = [](int64_t B, int64_t S, const std::vector<int64_t>& starts) {
    std::vector<int32_t> ks(size_t(B * S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0, d = 0; i < S; ++i) {
        while (d + 1 < int64_t(starts.size()) && starts[size_t(d + 1)] <= i) ++d;
        ks[size_t(b * S + i)] = int32_t(starts[size_t(d)]);
      }
    return ks;
  };
  const int64_t S = 300;
  const std::vector<int32_t> docs = documents(2, S, {0, 1, 63, 64, 65, 127, 192, 299});
  const std::vector<int32_t> one = documents(1, S, {0, 2, 128, 250});
  std::vector<int32_t> window(static_cast<size_t>(S)), pair(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    window[size_t(i)] = int32_t(i - 100 + 1);    // a 100-token sliding window
    pair[size_t(i)] = int32_t(-60 + i * 3 / 2);  // from before the keys to past them
  }
  auto view = [](const std::vector<int32_t>& v) {
    return View<const int32_t>(v.data(), {int64_t(v.size())});
  };
  check_bf16_attention(g, 2, S, 8, 2, 0, true, 64, AttnMask::causal_from(view(docs)));
  check_bf16_attention(g, 1, S, 4, 4, 0, true, 128, AttnMask::causal_from(view(one)));
  check_bf16_attention(g, 1, S, 8, 2, 0, true, 32, AttnMask::causal_from(view(window)));
  check_bf16_attention(g, 1, S, 8, 2, 0, true, 64, AttnMask::full_from(view(pair)));
  check_bf16_attention(g, 2, S, 8, 2, 64, false, 64, AttnMask::causal_from(view(docs)));
  check_bf16_attention(g, 1, S, 8, 2, 64, false, 64, AttnMask::causal_from(view(window)));
  check_bf16_attention(g, 1, S, 8, 2, 64, false, 64, AttnMask::full_from(view(pair)));
}

// Note [bf16 bodies]: the layers' row and elementwise kernels on bf16 tensors against the CPU's
// bf16 storage (the f32 kernels over the widened tensors, each output rounded once). The GPU's
// f32 arithmetic differs from the CPU's by an ulp here and there (fused multiply-adds, expf),
// which can move a bf16 rounding by one step: within one bf16 ulp, and the f32 statistics
// within kTol.
TEST(CudaBackend, bf16_elementwise_kernels_match_the_cpus_bf16_storage) {
  REQUIRE_GPU();
  ASSERT_TRUE(g->bf16_elementwise());
  Bf16StorageBackend ref(cpu_backend());
  const int64_t T = 67, C = 256, H = 4, D = 64;
  RawAllocator& dev = g->allocator(MemSpace::kDevice);
  struct Arg {                   // host values and a device copy
    std::vector<uint16_t> bits;  // bf16, or the f32's two halves
    Shape shape;
    DType dt;
  };
  auto b16 = [](Shape shape, uint64_t seed) {
    Arg a{{}, shape, DType::kBF16};
    for (float x : randoms(shape.numel(), seed, -2.0f, 2.0f))
      a.bits.push_back(float_to_bf16(x).bits);
    return a;
  };
  auto f32 = [](Shape shape, uint64_t seed) {
    Arg a{std::vector<uint16_t>(size_t(shape.numel()) * 2), shape, DType::kF32};
    const std::vector<float> v = randoms(shape.numel(), seed, 0.5f, 1.5f);
    std::memcpy(a.bits.data(), v.data(), v.size() * 4);
    return a;
  };
  using Run = std::function<void(Backend&, std::vector<Tensor>&)>;
  auto check = [&](const char* what, std::vector<Arg> args, const Run& op) {
    SCOPED_TRACE(what);
    std::vector<Arg> host = args;
    std::vector<Tensor> ht, gt;
    std::vector<RawBuffer> bufs;
    for (Arg& a : host) ht.emplace_back(a.bits.data(), a.shape, a.dt, MemSpace::kHost);
    for (const Arg& a : args) {
      bufs.emplace_back(dev, std::max<int64_t>(2, int64_t(a.bits.size()) * 2), "test");
      g->copy_from_host(bufs.back().data(), a.bits.data(), int64_t(a.bits.size()) * 2);
      gt.push_back(bufs.back().tensor(a.shape, a.dt));
    }
    op(ref, ht);
    op(*g, gt);
    for (size_t i = 0; i < args.size(); ++i) {
      std::vector<uint16_t> got(host[i].bits.size());
      g->copy_to_host(got.data(), bufs[i].data(), int64_t(got.size()) * 2);
      const int64_t n = host[i].shape.numel();
      for (int64_t j = 0; j < n; ++j) {
        if (args[i].dt == DType::kBF16) {  // steps apart, in the order of the values
          const auto ordered = [](uint16_t b) {
            return (b & 0x8000) ? -int(b & 0x7fff) : int(b & 0x7fff);
          };
          ASSERT_LE(std::abs(ordered(got[j]) - ordered(host[i].bits[j])), 1)
              << "argument " << i << " element " << j;
        } else {
          float x, y;
          std::memcpy(&x, &got[2 * j], 4);
          std::memcpy(&y, &host[i].bits[2 * j], 4);
          ASSERT_LE(std::abs(x - y), kTol * std::max(1.0f, std::abs(y)))
              << "argument " << i << " element " << j;
        }
      }
    }
  };
  // one kernel a check, on the same inputs on both sides (a chained call would compound an ulp)
  check(
      "rmsnorm_forward", {b16({T, C}, 1), f32({T}, 2), b16({T, C}, 3), b16({C}, 4)},
      [](Backend& b, std::vector<Tensor>& t) { b.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f); });
  check("rmsnorm_backward",
        {b16({T, C}, 5), f32({C}, 6), b16({T, C}, 7), b16({T, C}, 3), b16({C}, 4), f32({T}, 2)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]);
        });
  check("swiglu_forward", {b16({T, C}, 8), b16({T, C}, 9), b16({T, C}, 10)},
        [](Backend& b, std::vector<Tensor>& t) { b.swiglu_forward(t[0], t[1], t[2]); });
  check(
      "swiglu_backward",
      {b16({T, C}, 11), b16({T, C}, 12), b16({T, C}, 13), b16({T, C}, 9), b16({T, C}, 10)},
      [](Backend& b, std::vector<Tensor>& t) { b.swiglu_backward(t[0], t[1], t[2], t[3], t[4]); });
  for (float sign : {1.0f, -1.0f})
    check("rope", {b16({T, H * D}, 14), f32({T, D / 2}, 15), f32({T, D / 2}, 16)},
          [&](Backend& b, std::vector<Tensor>& t) {
            if (sign > 0)
              b.rope_forward(t[0], t[1], t[2], D, 0);
            else
              b.rope_backward(t[0], t[1], t[2], D, 0);
          });
  check("add_into", {b16({T, C}, 17), b16({T, C}, 18), b16({T, C}, 19), f32({T, C}, 20)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.add_into(t[0], t[1]);
          b.add_into(t[2], t[3]);
        });
  check("scale, copy, fill", {b16({T, C}, 21), b16({T, C}, 22), b16({T, C}, 23)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.scale(t[0], 0.3f);
          b.copy(t[1].slice_cols(0, 100), ConstTensor(t[2].slice_cols(50, 150)));
          b.fill(t[2].slice_rows(20, 40), 1.0f / 3.0f);
        });
  check("gelu_forward", {b16({T, C}, 24), b16({T, C}, 25)},
        [](Backend& b, std::vector<Tensor>& t) { b.gelu_forward(t[0], t[1]); });
  check("gelu_backward", {b16({T, C}, 26), b16({T, C}, 27), b16({T, C}, 25)},
        [](Backend& b, std::vector<Tensor>& t) { b.gelu_backward(t[0], t[1], t[2]); });
  check("bias", {b16({T, C}, 28), b16({C}, 29), f32({C}, 30), b16({T, C}, 31)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.bias_add(t[0], t[1]);
          b.bias_backward(t[2], t[3]);
        });
}

// memo plan --device cuda sizes a trace with CudaSizes (cuda/cuda_sizes.h): the backend's own.
TEST(CudaBackend, cuda_sizes_are_the_backends) {
  REQUIRE_GPU();
  CudaSizes sizes;
  EXPECT_EQ(sizes.reproducible_rows(), g->reproducible_rows());
  EXPECT_EQ(sizes.matmul_workspace_bytes(), g->matmul_workspace_bytes());
  EXPECT_EQ(sizes.bf16_products(), g->bf16_products());
  EXPECT_EQ(sizes.bf16_attention(), g->bf16_attention());
  EXPECT_EQ(sizes.bf16_elementwise(), g->bf16_elementwise());
  for (const int64_t S : {1, 100, 4096, 32768})
    for (const auto& [H, Hkv, D] : {std::tuple{32L, 8L, 64L}, std::tuple{12L, 12L, 64L}}) {
      EXPECT_EQ(sizes.attention_forward_scratch_numel(S, D, H, Hkv),
                g->attention_forward_scratch_numel(S, D, H, Hkv));
      EXPECT_EQ(sizes.attention_backward_scratch_numel(S, D, H, Hkv),
                g->attention_backward_scratch_numel(S, D, H, Hkv));
      EXPECT_EQ(sizes.attention_decode_scratch_numel(S), g->attention_decode_scratch_numel(S));
      EXPECT_EQ(sizes.bf16_attention_forward_scratch_numel(S, D, H, Hkv),
                g->bf16_attention_forward_scratch_numel(S, D, H, Hkv));
      EXPECT_EQ(sizes.bf16_attention_backward_scratch_numel(S, D, H, Hkv),
                g->bf16_attention_backward_scratch_numel(S, D, H, Hkv));
    }
  for (const auto& [rows, numel] : {std::pair{0L, 5000L}, std::pair{300L, 300L * 4096L}})
    EXPECT_EQ(sizes.adafactor_partial_numel(rows, numel), g->adafactor_partial_numel(rows, numel));
  EXPECT_EQ(sizes.noise_probe_partial_numel(12345678), g->noise_probe_partial_numel(12345678));
}

TEST(CudaBackend, copy_streams_order_copies_by_events_under_random_delays) {
  REQUIRE_GPU();
  const int64_t n = 1 << 20;
  RawBuffer dev(g->allocator(MemSpace::kDevice), n * 4, "dev");
  RawBuffer host(g->allocator(MemSpace::kPinnedHost), n * 4, "pinned");
  RawBuffer back(g->allocator(MemSpace::kPinnedHost), n * 4, "pinned back");
  const Tensor d = dev.tensor({n}, DType::kF32);
  const View<float> h(host.as<float>(), {n}), k(back.as<float>(), {n});  // pinned: host reads
  StreamOptions delays;
  delays.max_random_delay_s = 0.01;
  delays.random_delay_seed = 3;
  auto d2h = g->make_copy_stream("d2h", delays);
  auto h2d = g->make_copy_stream("h2d", delays);
  const double waited0 = g->compute_stream().waited_s();
  for (int round = 0; round < 5; ++round) {
    g->fill(d, float(round + 1));
    d2h->wait(g->compute_stream().record());  // the fill is done
    d2h->copy(host.data(), dev.data(), n * 4);
    Event offloaded = d2h->record();
    g->compute_stream().wait(offloaded);  // no host block
    g->fill(d, -1.0f);                    // overwrites only after the copy
    h2d->wait(g->compute_stream().record());
    h2d->copy(dev.data(), host.data(), n * 4);
    g->compute_stream().wait(h2d->record());
    g->scale(d, 2.0f);
    g->copy_to_host(back.data(), dev.data(), n * 4);
    EXPECT_EQ(h[0], float(round + 1));
    EXPECT_EQ(k[0], 2.0f * float(round + 1));
    EXPECT_EQ(k[n - 1], 2.0f * float(round + 1));
  }
  EXPECT_EQ(d2h->copied_bytes(), 5 * n * 4);
  d2h->synchronize();
  EXPECT_GT(d2h->busy_s(), 0.0);
  // the compute stream stood still for the delayed copies (ActivationStrategy::copy_time's wait)
  g->compute_stream().synchronize();
  EXPECT_GT(g->compute_stream().waited_s(), waited0);
}

// Many chunks (Note [Chunked attention]): the budget's at 1,999 rows and 32 heads (2 chunks, the
// last short); then chunks of 64 rows forced on smaller shapes (two sequences, 4 query heads a
// kv head, S not a multiple of 16), causal and full.
TEST(CudaBackend, chunked_attention_over_many_chunks_matches_the_cpu) {
  REQUIRE_GPU();
  struct Rows {
    Backend* b;
    ~Rows() { set_cuda_attention_chunk_rows(*b, 0); }
  } const reset{g};
  for (const auto& [B, S, H, Hkv, mask] : {std::tuple{1L, 1999L, 32L, 8L, AttnMask::kCausal},
                                           std::tuple{2L, 301L, 8L, 2L, AttnMask::kCausal},
                                           std::tuple{2L, 301L, 8L, 2L, AttnMask::kFull}}) {
    set_cuda_attention_chunk_rows(*g, S < 1000 ? 64 : 0);
    SCOPED_TRACE(str("B ", B, " S ", S, " H ", H, " Hkv ", Hkv));
    compare_attention(g, B, S, H, Hkv, 64, mask, 21, 2.0f);
  }
}

TEST(CudaBackend, runs_repeat_bit_for_bit) {
  REQUIRE_GPU();
  const int64_t B = 1, S = 300, H = 4, Hkv = 4, D = 64;
  const int64_t bs = g->attention_backward_scratch_numel(S, D, H, Hkv);
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    auto out = compare(
        *g,
        {rnd({B * S, H * D}, 1), rnd({B * S, Hkv * D}, 2), rnd({B * S, Hkv * D}, 3),
         zeros({B * S, H * D}), zeros({B, H, S}),
         zeros({std::max(g->attention_forward_scratch_numel(S, D, H, Hkv),
                         cpu_backend().attention_forward_scratch_numel(S, D, H, Hkv))}),
         rnd({B * S, H * D}, 4), zeros({B * S, H * D}), zeros({B * S, Hkv * D}),
         zeros({B * S, Hkv * D}),
         zeros({std::max<int64_t>(bs,
                                  cpu_backend().attention_backward_scratch_numel(S, D, H, Hkv))})},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.attention_forward(t[3], t[4], t[0], t[1], t[2], B, H, Hkv, t[5], AttnMask::kCausal);
          b.attention_backward(t[7], t[8], t[9], t[6], t[0], t[1], t[2], t[3], t[4], B, H, Hkv,
                               t[10], AttnMask::kCausal);
          return 0.0;
        },
        kSumTol, {5, 10});
    if (run == 0)
      first = out;
    else
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(first[i], out[i]) << "buffer " << i;
  }
}

}  // namespace
}  // namespace memo
