// Token embedding: fp32 lookup and scatter-add vs the float64 reference, repeated tokens summed
// in order, the reference backward vs finite differences, and out-of-range ids rejected by name.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

TEST(EmbeddingForward, copies_rows_exactly) {
  for (auto [T, C] : test::awkward_shapes()) {
    const int32_t V = 11;
    const std::vector<float> wte = test::random_floats(V * C, 40);
    const std::vector<int32_t> ids = test::random_ids(T, V, 41);
    std::vector<float> x(T * C);
    embedding_forward(Tensor(x.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                      ConstTensor(wte.data(), {V, C}));
    std::vector<double> wd = test::to_double(wte), xd(T * C);
    embedding_forward_ref(TensorF64(xd.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                          ConstTensorF64(wd.data(), {V, C}));
    EXPECT_EQ(test::max_rel_err(x, xd), 0.0) << T << "x" << C;  // a copy: exact
  }
}

TEST(EmbeddingBackward, matches_float64_reference_with_repeated_tokens) {
  for (auto [T, C] : test::awkward_shapes()) {
    const int32_t V = 5;  // few ids: most rows receive several tokens
    const std::vector<float> dx = test::random_floats(T * C, 42);
    const std::vector<int32_t> ids = test::random_ids(T, V, 43);
    std::vector<float> dwte = test::random_floats(V * C, 44);  // accumulates into existing values
    std::vector<double> dwd = test::to_double(dwte), dxd = test::to_double(dx), scale(V * C);
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = std::abs(dwd[i]);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) scale[ids[t] * C + c] += std::abs(dxd[t * C + c]);
    embedding_backward(Tensor(dwte.data(), {V, C}), ConstTensor(dx.data(), {T, C}),
                       View<const int32_t>(ids.data(), {T}));
    embedding_backward_ref(TensorF64(dwd.data(), {V, C}), ConstTensorF64(dxd.data(), {T, C}),
                           View<const int32_t>(ids.data(), {T}));
    // A float sum of n terms in order errs by at most (n - 1) u of the sum of absolute values;
    // n <= T + 1.
    EXPECT_LE(test::max_scaled_err(dwte, dwd, scale), double(T) * kFloatU) << T << "x" << C;
  }
}

TEST(EmbeddingBackward, reference_gradient_matches_finite_differences) {
  const int64_t T = 6, C = 5;
  const int32_t V = 4;
  const std::vector<int32_t> ids = {2, 0, 2, 3, 2, 0};
  const std::vector<double> wte0 = test::to_double(test::random_floats(V * C, 45)),
                            probe = test::to_double(test::random_floats(T * C, 46));
  auto loss = [&](const std::vector<double>& wte) {
    std::vector<double> x(T * C);
    embedding_forward_ref(TensorF64(x.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                          ConstTensorF64(wte.data(), {V, C}));
    return test::dot(x, probe);
  };
  std::vector<double> dwte(V * C, 0.0);
  embedding_backward_ref(TensorF64(dwte.data(), {V, C}), ConstTensorF64(probe.data(), {T, C}),
                         View<const int32_t>(ids.data(), {T}));
  // L is linear in wte: finite differences are exact up to roundoff (~1e-11).
  EXPECT_LE(test::max_grad_err(dwte, test::finite_diff_grad(wte0, loss)), 1e-8);
}

TEST(EmbeddingBackward, gives_the_same_bits_on_one_and_two_threads) {
  const int64_t T = 300, C = 97;  // above the parallel threshold; C not a multiple of 16
  const int32_t V = 7;
  const std::vector<float> dx = test::random_floats(T * C, 47);
  const std::vector<int32_t> ids = test::random_ids(T, V, 48);
  auto run = [&](int threads) {
    std::vector<float> dwte(V * C, 0.0f);
    test::with_threads(threads, [&] {
      embedding_backward(Tensor(dwte.data(), {V, C}), ConstTensor(dx.data(), {T, C}),
                         View<const int32_t>(ids.data(), {T}));
    });
    return dwte;
  };
  EXPECT_EQ(run(1), run(2));
}

TEST(Embedding, out_of_range_id_error_names_position_value_and_vocabulary) {
  const int64_t T = 4, C = 3;
  const int32_t V = 10;
  std::vector<float> x(T * C), wte(V * C);
  for (int32_t bad : {10, -2}) {
    const std::vector<int32_t> ids = {1, 2, bad, 3};
    try {
      embedding_forward(Tensor(x.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                        ConstTensor(wte.data(), {V, C}));
      FAIL() << "no DataError for id " << bad;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " at position 2"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
    EXPECT_THROW(embedding_backward(Tensor(wte.data(), {V, C}), ConstTensor(x.data(), {T, C}),
                                    View<const int32_t>(ids.data(), {T})),
                 DataError);
  }
}

// The check scans ids in blocks (checks.cc, first_id_outside): the first bad id is named
// wherever it lies, at a block's first or last position or at the end of a long micro-batch, and
// the extremes of int32 are caught (a negative id compares as a large unsigned one).
TEST(Embedding, the_first_bad_id_of_a_long_micro_batch_is_named) {
  const int64_t T = 10000, C = 2;
  const int32_t V = 10;
  std::vector<float> x(T * C), wte(V * C);
  for (int64_t at : {int64_t(0), int64_t(4095), int64_t(4096), T - 1})
    for (int32_t bad : {V, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                        int32_t(-2)}) {
      std::vector<int32_t> ids(size_t(T), 3);
      ids[size_t(at)] = bad;
      if (at + 1 < T) ids[size_t(T - 1)] = V + 1;  // a later bad id is not the one named
      try {
        embedding_forward(Tensor(x.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                          ConstTensor(wte.data(), {V, C}));
        FAIL() << "no DataError for id " << bad << " at " << at;
      } catch (const DataError& e) {
        EXPECT_NE(std::string(e.what()).find(
                      str("token id ", bad, " at position ", at, " is outside the vocabulary")),
                  std::string::npos)
            << e.what();
      }
    }
}

// Under tensor parallelism a rank's table holds some of the vocabulary's rows; a token whose row
// another rank holds (kOtherShard) gets a zero row and adds nothing to the gradient.
TEST(Embedding, another_ranks_tokens_give_zero_rows_and_no_gradient) {
  const int64_t T = 5, C = 3, V = 4;
  const std::vector<float> wte = test::random_floats(V * C, 44);
  const std::vector<int32_t> ids = {2, kOtherShard, 0, kOtherShard, 2};
  std::vector<float> x(T * C, 7.0f);
  embedding_forward(Tensor(x.data(), {T, C}), View<const int32_t>(ids.data(), {T}),
                    ConstTensor(wte.data(), {V, C}));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(x[t * C + c], ids[t] == kOtherShard ? 0.0f : wte[ids[t] * C + c]) << t << "," << c;
  const std::vector<float> dx = test::random_floats(T * C, 45);
  std::vector<float> dwte(V * C, 0.0f);
  embedding_backward(Tensor(dwte.data(), {V, C}), ConstTensor(dx.data(), {T, C}),
                     View<const int32_t>(ids.data(), {T}));
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[0 * C + c], dx[2 * C + c]);
    EXPECT_EQ(dwte[1 * C + c], 0.0f);
    EXPECT_EQ(dwte[2 * C + c], dx[0 * C + c] + dx[4 * C + c]);
    EXPECT_EQ(dwte[3 * C + c], 0.0f);
  }
}

TEST(Embedding, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  const std::vector<int32_t> ids = {0, 1, 2};
  EXPECT_THROW(embedding_forward(Tensor(buf.data(), {4, 4}), View<const int32_t>(ids.data(), {3}),
                                 ConstTensor(buf.data(), {8, 4})),
               Error);
  EXPECT_THROW(embedding_forward(Tensor(buf.data(), {3, 4}), View<const int32_t>(ids.data(), {3}),
                                 ConstTensor(buf.data(), {8, 5})),
               Error);
}

}  // namespace
}  // namespace memo::cpu
