// Tests of the tiled fp32 attention (attention.cc) against the float64 reference
// (attention_reference.cc), of the reference's backward against finite differences, and of
// determinism, extreme scores and the entry checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/attention_reference.h"

namespace memo::cpu {
namespace {

struct AttnCase {
  int64_t B, S, H, Hkv, D;
};

std::ostream& operator<<(std::ostream& out, const AttnCase& c) {
  return out << "B" << c.B << "_S" << c.S << "_H" << c.H << "_Hkv" << c.Hkv << "_D" << c.D;
}

// All tensors of one case, in float (kernel) and double (reference) copies of the same values.
struct AttnData {
  AttnCase c;
  AttnMask mask = AttnMask::kCausal;
  int64_t T, qc, kc;  // rows, q columns, k columns
  std::vector<float> q, k, v, dout, o, lse, dq, dk, dv, scratch;
  std::vector<double> q64, k64, v64, dout64, o64, lse64, dq64, dk64, dv64;

  AttnData(AttnCase cs, double qk_std, uint32_t seed)
      : c(cs), T(cs.B * cs.S), qc(cs.H * cs.D), kc(cs.Hkv * cs.D) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t n, double std_dev) {
      x.resize(n);
      for (float& e : x) e = float(std_dev * normal(rng));
    };
    fill(q, T * qc, qk_std);
    fill(k, T * kc, qk_std);
    fill(v, T * kc, 1.0);
    fill(dout, T * qc, 1.0);
    o.assign(T * qc, 0.0f);
    dq.assign(T * qc, 0.0f);
    dk.assign(T * kc, 0.0f);
    dv.assign(T * kc, 0.0f);
    lse.assign(c.B * c.H * c.S, 0.0f);
    q64.assign(q.begin(), q.end());
    k64.assign(k.begin(), k.end());
    v64.assign(v.begin(), v.end());
    dout64.assign(dout.begin(), dout.end());
    o64.assign(T * qc, 0.0);
    dq64.assign(T * qc, 0.0);
    dk64.assign(T * kc, 0.0);
    dv64.assign(T * kc, 0.0);
    lse64.assign(c.B * c.H * c.S, 0.0);
  }

  void run_kernels() {
    scratch.assign(std::max(attention_forward_scratch_numel(c.D, c.H, c.Hkv),
                            attention_backward_scratch_numel(c.S, c.D, c.H, c.Hkv)),
                   0.0f);
    Tensor s(scratch.data(), {int64_t(scratch.size())});
    attention_forward(Tensor(o.data(), {T, qc}), Tensor(lse.data(), {c.B, c.H, c.S}),
                      ConstTensor(q.data(), {T, qc}), ConstTensor(k.data(), {T, kc}),
                      ConstTensor(v.data(), {T, kc}), c.B, c.H, c.Hkv, s, mask);
    attention_backward(Tensor(dq.data(), {T, qc}), Tensor(dk.data(), {T, kc}),
                       Tensor(dv.data(), {T, kc}), ConstTensor(dout.data(), {T, qc}),
                       ConstTensor(q.data(), {T, qc}), ConstTensor(k.data(), {T, kc}),
                       ConstTensor(v.data(), {T, kc}), ConstTensor(o.data(), {T, qc}),
                       ConstTensor(lse.data(), {c.B, c.H, c.S}), c.B, c.H, c.Hkv, s, mask);
  }

  void run_reference() {
    attention_forward_ref(
        View<double>(o64.data(), {T, qc}), View<double>(lse64.data(), {c.B, c.H, c.S}),
        View<const double>(q64.data(), {T, qc}), View<const double>(k64.data(), {T, kc}),
        View<const double>(v64.data(), {T, kc}), c.B, c.H, c.Hkv, mask);
    attention_backward_ref(
        View<double>(dq64.data(), {T, qc}), View<double>(dk64.data(), {T, kc}),
        View<double>(dv64.data(), {T, kc}), View<const double>(dout64.data(), {T, qc}),
        View<const double>(q64.data(), {T, qc}), View<const double>(k64.data(), {T, kc}),
        View<const double>(v64.data(), {T, kc}), c.B, c.H, c.Hkv, mask);
  }
};

// Largest |got - want| / (1 + |want|): absolute near 0, relative for large values.
double max_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == -INFINITY) {  // the lse of a row that sees no key
      EXPECT_EQ(got[i], -INFINITY) << "element " << i;
      continue;
    }
    EXPECT_TRUE(std::isfinite(got[i])) << "element " << i;
    err = std::max(err, std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
  }
  return err;
}

// fp32 against float64, unit-variance inputs, sums over at most S = 200 keys and D = 64: float
// rounding (6e-8 per op) and the Cephes exp (2e-7) leave measured errors up to 3.7e-6; the bounds
// are ~10x that and still catch any indexing or masking slip (one wrongly visible key gives 1e-2).
constexpr double kFwdTol = 2e-5;
constexpr double kBwdTol = 5e-5;  // gradients sum one more product, over up to S * G terms

// Every output of the kernels within fwd_tol (o, lse) and bwd_tol (dq, dk, dv) of float64.
void expect_within(const AttnData& data, double fwd_tol, double bwd_tol) {
  EXPECT_LT(max_err(data.o, data.o64), fwd_tol);
  EXPECT_LT(max_err(data.lse, data.lse64), fwd_tol);
  EXPECT_LT(max_err(data.dq, data.dq64), bwd_tol);
  EXPECT_LT(max_err(data.dk, data.dk64), bwd_tol);
  EXPECT_LT(max_err(data.dv, data.dv64), bwd_tol);
}

class AttentionVsReference : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionVsReference, forward_and_backward_match_float64) {
  AttnData data(GetParam(), 1.0, 42);
  data.run_kernels();
  data.run_reference();
  expect_within(data, kFwdTol, kBwdTol);
}

// Every S at one head layout; every head layout (MHA, GQA, MQA) at two sizes; D from 1 to 64
// including ones that are not a multiple of the 8-float vector; batches of 1 and 3. B*Hkv of 1
// and 3 take the split backward on 2 threads, 2, 6 and 8 the by-group one.
std::vector<AttnCase> attention_cases() {
  std::vector<AttnCase> cases;
  for (int64_t S : {1, 7, 63, 64, 65, 130, 200}) cases.push_back({1, S, 4, 2, 16});
  for (auto [H, Hkv] : {std::pair{1, 1}, {4, 2}, {6, 1}, {8, 8}}) {
    cases.push_back({1, 130, H, Hkv, 24});
    cases.push_back({3, 65, H, Hkv, 8});
  }
  for (int64_t D : {1, 8, 12, 16, 48, 64}) cases.push_back({1, 100, 4, 2, D});
  cases.push_back({3, 200, 6, 1, 48});
  cases.push_back({3, 7, 8, 8, 12});
  cases.push_back({1, 200, 1, 1, 12});
  return cases;
}

// Every key visible (a context-parallel rank's block over an earlier chunk): the same bounds.
TEST_P(AttentionVsReference, full_mask_matches_float64) {
  AttnData data(GetParam(), 1.0, 43);
  data.mask = AttnMask::kFull;
  data.run_kernels();
  data.run_reference();
  expect_within(data, kFwdTol, kBwdTol);
}

// The second half of a sequence attends causally to itself and fully to the first half; merging
// the two by their log-sum-exp gives the causal attention of the whole sequence on those rows.
TEST(Attention, merge_of_two_key_blocks_equals_attention_over_both) {
  const int64_t n = 70, H = 4, Hkv = 2, D = 16, QD = H * D, KD = Hkv * D;
  AttnData whole({1, 2 * n, H, Hkv, D}, 1.0, 5);
  whole.run_reference();
  std::vector<float> scratch(size_t(attention_forward_scratch_numel(D, H, Hkv)));
  const Tensor s(scratch.data(), {int64_t(scratch.size())});
  auto rows = [&](std::vector<float>& x, int64_t width, int64_t r0) {
    return Tensor(x.data() + r0 * width, {n, width});
  };
  std::vector<float> o(size_t(n * QD)), lse(size_t(H * n)), o_part(o.size()), lse_part(lse.size());
  attention_forward(Tensor(o.data(), {n, QD}), Tensor(lse.data(), {1, H, n}), rows(whole.q, QD, n),
                    rows(whole.k, KD, n), rows(whole.v, KD, n), 1, H, Hkv, s, AttnMask::kCausal);
  attention_forward(Tensor(o_part.data(), {n, QD}), Tensor(lse_part.data(), {1, H, n}),
                    rows(whole.q, QD, n), rows(whole.k, KD, 0), rows(whole.v, KD, 0), 1, H, Hkv, s,
                    AttnMask::kFull);
  attention_merge(Tensor(o.data(), {n, QD}), Tensor(lse.data(), {1, H, n}),
                  ConstTensor(o_part.data(), {n, QD}), ConstTensor(lse_part.data(), {1, H, n}));
  const std::vector<double> want_o(whole.o64.begin() + n * QD, whole.o64.end());
  std::vector<double> want_lse;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = n; t < 2 * n; ++t) want_lse.push_back(whole.lse64[size_t(h * 2 * n + t)]);
  EXPECT_LT(max_err(o, want_o), kFwdTol);
  EXPECT_LT(max_err(lse, want_lse), kFwdTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionVsReference, ::testing::ValuesIn(attention_cases()),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

// Masks with a key_start (AttnMask): each case gives key_start of one sequence of S rows, which
// every sequence of the batch shares.
struct MaskCase {
  const char* name;
  AttnCase c;
  bool causal;
  std::function<std::vector<int32_t>(int64_t S)> key_start;
};

// Documents of the given lengths, the last one running on to S: key_start = the row's document's
// first row.
std::vector<int32_t> document_starts(int64_t S, const std::vector<int64_t>& lengths) {
  std::vector<int32_t> ks;
  int32_t start = 0;
  for (int64_t len : lengths) {
    for (int64_t i = 0; i < len && int64_t(ks.size()) < S; ++i) ks.push_back(start);
    start = int32_t(ks.size());
  }
  while (int64_t(ks.size()) < S) ks.push_back(start);
  return ks;
}

std::vector<int32_t> window_starts(int64_t S, int64_t w) {
  std::vector<int32_t> ks(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) ks[size_t(i)] = int32_t(i - w + 1);
  return ks;
}

std::vector<MaskCase> mask_cases() {
  return {
      // boundaries on tile edges (64, 128), one-token documents, a document across two tiles
      {"documents_on_tile_edges",
       {1, 200, 4, 2, 16},
       true,
       [](int64_t S) {
         return document_starts(S, {64, 64, 1, 1, 30});
       }},
      {"documents_inside_tiles",
       {2, 130, 4, 2, 12},
       true,
       [](int64_t S) {
         return document_starts(S, {5, 50, 9, 3});
       }},
      {"one_document_per_token",
       {1, 70, 2, 1, 8},
       true,
       [](int64_t S) { return document_starts(S, std::vector<int64_t>(70, 1)); }},
      {"window_1", {1, 100, 2, 2, 8}, true, [](int64_t S) { return window_starts(S, 1); }},
      {"window_17", {3, 150, 6, 1, 24}, true, [](int64_t S) { return window_starts(S, 17); }},
      {"window_64", {1, 200, 4, 2, 16}, true, [](int64_t S) { return window_starts(S, 64); }},
      {"window_65", {1, 200, 8, 8, 16}, true, [](int64_t S) { return window_starts(S, 65); }},
      {"documents_and_window",
       {1, 200, 4, 1, 16},
       true,
       [](int64_t S) {
         std::vector<int32_t> ks = document_starts(S, {100, 33, 2});
         for (int64_t i = 0; i < S; ++i) ks[size_t(i)] = std::max(ks[size_t(i)], int32_t(i - 40));
         return ks;
       }},
      // a chunk pair's keys (full): starts before the chunk, inside it and past its last key
      {"full_with_starts_before_inside_after",
       {2, 130, 4, 2, 16},
       false,
       [](int64_t S) {
         std::vector<int32_t> ks(static_cast<size_t>(S));
         for (int64_t i = 0; i < S; ++i)
           ks[size_t(i)] = int32_t(i < 30 ? -5 : i < 90 ? i - 20 : S + 3);
         return ks;
       }},
  };
}

void PrintTo(const MaskCase& m, std::ostream* out) { *out << m.name << " " << m.c; }

class MaskedAttention : public ::testing::TestWithParam<MaskCase> {};

// The bounds of the unmasked cases hold: a wrongly visible or hidden key moves o by ~1e-2.
TEST_P(MaskedAttention, matches_float64) {
  const MaskCase& m = GetParam();
  AttnData data(m.c, 1.0, 44);
  std::vector<int32_t> ks;
  for (int64_t b = 0; b < m.c.B; ++b) {
    const std::vector<int32_t> one = m.key_start(m.c.S);
    ks.insert(ks.end(), one.begin(), one.end());
  }
  data.mask = {m.causal, View<const int32_t>(ks.data(), {int64_t(ks.size())})};
  data.run_kernels();
  data.run_reference();
  expect_within(data, kFwdTol, kBwdTol);
}

INSTANTIATE_TEST_SUITE_P(Masks, MaskedAttention, ::testing::ValuesIn(mask_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Attention, rejects_a_key_start_that_decreases_or_passes_a_causal_row) {
  AttnData data({1, 8, 2, 1, 4}, 1.0, 1);
  std::vector<float> scratch(attention_forward_scratch_numel(4, 2, 1));
  for (auto [ks, causal, want] :
       {std::tuple{std::vector<int32_t>{0, 0, 2, 2, 1, 5, 5, 5}, true, "below the row before's"},
        {std::vector<int32_t>{0, 0, 3, 3, 4, 5, 6, 7}, true, "after the row itself"},
        {std::vector<int32_t>{0, 0, 2}, false, "must be a vector of 1 x 8"}}) {
    try {
      attention_forward(Tensor(data.o.data(), {8, 8}), Tensor(data.lse.data(), {1, 2, 8}),
                        ConstTensor(data.q.data(), {8, 8}), ConstTensor(data.k.data(), {8, 4}),
                        ConstTensor(data.v.data(), {8, 4}), 1, 2, 1,
                        Tensor(scratch.data(), {int64_t(scratch.size())}),
                        {causal, View<const int32_t>(ks.data(), {int64_t(ks.size())})});
      FAIL() << "no error for " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(Attention, large_scores_stay_finite_and_accurate) {
  // q, k entries of std 7.07: scores q.k / sqrt(D) have std 50, so softmax rows are nearly
  // one-hot and exp underflows for most keys. Scores of size 50 carry float rounding of ~5e-6
  // absolute, which moves p by as much relative; measured errors reach 2e-5, so 2e-4 (10x).
  AttnData data({1, 130, 4, 2, 16}, std::sqrt(50.0), 7);
  data.run_kernels();
  data.run_reference();
  constexpr double kLargeTol = 2e-4;
  expect_within(data, kLargeTol, kLargeTol);
}

TEST(Attention, repeated_calls_are_bitwise_equal) {
  for (AttnCase c : {AttnCase{1, 200, 1, 1, 16}, AttnCase{2, 130, 4, 2, 12}}) {
    AttnData first(c, 1.0, 3), second(c, 1.0, 3);
    first.run_kernels();
    second.run_kernels();
    for (auto [a, b] : {std::pair{&first.o, &second.o},
                        {&first.lse, &second.lse},
                        {&first.dq, &second.dq},
                        {&first.dk, &second.dk},
                        {&first.dv, &second.dv}})
      EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float))) << c;
  }
}

// Note [Attention threads and determinism]: the thread count picks how many heads of a kv head a
// forward item takes (forward_item_heads; S 256 is 4 query tiles, G 4: 4 heads on 1 thread, 2 on
// 2, 1 on 3), and each gives the same bits.
TEST(Attention, forward_items_of_one_two_or_four_heads_give_the_same_bits) {
  for (const AttnMask& mask : {AttnMask::kCausal, AttnMask::kFull}) {
    AttnData four({1, 256, 4, 1, 24}, 1.0, 6), two = four, one = four;
    four.mask = two.mask = one.mask = mask;
    test::with_threads(1, [&] { four.run_kernels(); });
    test::with_threads(2, [&] { two.run_kernels(); });
    test::with_threads(3, [&] { one.run_kernels(); });
    for (const AttnData* other : {&two, &one}) {
      EXPECT_EQ(0, std::memcmp(four.o.data(), other->o.data(), four.o.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(four.lse.data(), other->lse.data(), four.lse.size() * 4));
    }
  }
}

// Note [Attention threads and determinism]: the thread count picks the backward scheme (B * Hkv
// of 1 and 3: split on 2 threads, by group on 1), and both give the same bits.
TEST(Attention, by_group_and_split_backwards_give_the_same_bits) {
  for (AttnCase c : {AttnCase{3, 150, 6, 1, 12}, AttnCase{1, 200, 2, 1, 40}})
    for (const AttnMask& mask : {AttnMask::kCausal, AttnMask::kFull}) {
      AttnData split(c, 1.0, 4), by_group(c, 1.0, 4);
      split.mask = by_group.mask = mask;
      test::with_threads(2, [&] { split.run_kernels(); });
      test::with_threads(1, [&] { by_group.run_kernels(); });
      for (auto [a, b] : {std::pair{&split.dq, &by_group.dq},
                          {&split.dk, &by_group.dk},
                          {&split.dv, &by_group.dv}})
        EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float)))
            << c << (mask.causal ? " causal" : " full");
    }
}

// Note [Wide tile products]: on an AVX-512 CPU the products run on 512-bit vectors unless
// MEMO_CPU_ISA=avx2; both widths give the same bits, at every head dim's column blocks (D 8: the
// 256-bit tail alone; 16, 32, 48, 64: one block each; 40: a block and the tail; 128: two blocks),
// under causal, document and full masks.
TEST(Attention, wide_and_narrow_products_give_the_same_bits) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512 here: one width only";
  const char* cap = std::getenv("MEMO_CPU_ISA");
  const std::string saved = cap != nullptr ? cap : "";
  std::vector<int32_t> ks;
  for (int64_t i = 0; i < 150; ++i) ks.push_back(int32_t(i / 45 * 45));
  for (AttnCase c :
       {AttnCase{1, 150, 2, 1, 8}, AttnCase{1, 150, 2, 2, 16}, AttnCase{1, 150, 4, 2, 32},
        AttnCase{1, 150, 2, 1, 40}, AttnCase{1, 150, 2, 2, 48}, AttnCase{1, 150, 4, 2, 64},
        AttnCase{1, 150, 2, 1, 128}})
    for (const AttnMask& mask : {AttnMask::kCausal, AttnMask::kFull,
                                 AttnMask::causal_from({ks.data(), {int64_t(ks.size())}})}) {
      AttnData wide(c, 1.0, 5), narrow(c, 1.0, 5);
      wide.mask = narrow.mask = mask;
      ::unsetenv("MEMO_CPU_ISA");
      wide.run_kernels();
      ::setenv("MEMO_CPU_ISA", "avx2", 1);
      narrow.run_kernels();
      for (auto [a, b] : {std::pair{&wide.o, &narrow.o},
                          {&wide.lse, &narrow.lse},
                          {&wide.dq, &narrow.dq},
                          {&wide.dk, &narrow.dk},
                          {&wide.dv, &narrow.dv}})
        EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float)))
            << c << (mask.causal ? " causal" : " full")
            << (mask.key_start.empty() ? "" : " documents");
    }
  if (saved.empty()) {
    ::unsetenv("MEMO_CPU_ISA");
  } else {
    ::setenv("MEMO_CPU_ISA", saved.c_str(), 1);
  }
}

TEST(AttentionReference, backward_matches_central_differences) {
  // Loss L = sum(o * dout); dL/dx by (L(x + eps) - L(x - eps)) / (2 eps) in double. Truncation is
  // O(eps^2) ~ 1e-10 and cancellation ~1e-16 / eps ~ 1e-10, so 1e-7 is a wide but meaningful bound.
  AttnData data({2, 5, 4, 2, 3}, 1.0, 11);
  data.run_reference();
  const AttnCase c = data.c;
  auto loss = [&] {
    std::vector<double> o(data.T * data.qc), lse(c.B * c.H * c.S);
    attention_forward_ref(View<double>(o.data(), {data.T, data.qc}),
                          View<double>(lse.data(), {c.B, c.H, c.S}),
                          View<const double>(data.q64.data(), {data.T, data.qc}),
                          View<const double>(data.k64.data(), {data.T, data.kc}),
                          View<const double>(data.v64.data(), {data.T, data.kc}), c.B, c.H, c.Hkv);
    double l = 0.0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * data.dout64[i];
    return l;
  };
  constexpr double kEps = 1e-5;
  for (auto [x, grad] :
       {std::pair{&data.q64, &data.dq64}, {&data.k64, &data.dk64}, {&data.v64, &data.dv64}})
    for (size_t i = 0; i < x->size(); ++i) {
      const double saved = (*x)[i];
      (*x)[i] = saved + kEps;
      const double up = loss();
      (*x)[i] = saved - kEps;
      const double down = loss();
      (*x)[i] = saved;
      EXPECT_NEAR((up - down) / (2 * kEps), (*grad)[i], 1e-7) << "element " << i;
    }
}

TEST(Attention, rejects_small_scratch_naming_the_need) {
  AttnData data({1, 8, 2, 1, 4}, 1.0, 1);
  std::vector<float> scratch(10);
  try {
    attention_forward(Tensor(data.o.data(), {8, 8}), Tensor(data.lse.data(), {1, 2, 8}),
                      ConstTensor(data.q.data(), {8, 8}), ConstTensor(data.k.data(), {8, 4}),
                      ConstTensor(data.v.data(), {8, 4}), 1, 2, 1, Tensor(scratch.data(), {10}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scratch has 10 floats, needs"), std::string::npos)
        << e.what();
  }
}

TEST(Attention, rejects_kv_shape_naming_the_expected_one) {
  AttnData data({1, 8, 2, 1, 4}, 1.0, 1);
  std::vector<float> scratch(attention_forward_scratch_numel(4, 2, 1));
  try {
    attention_forward(Tensor(data.o.data(), {8, 8}), Tensor(data.lse.data(), {1, 2, 8}),
                      ConstTensor(data.q.data(), {8, 8}), ConstTensor(data.k.data(), {8, 4}),
                      ConstTensor(data.v.data(), {8, 4}), 1, 2, 2,
                      Tensor(scratch.data(), {int64_t(scratch.size())}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be [8, 8]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memo::cpu
