// Tests of the bf16 attention (attention_bf16.cc) on each of its product paths this CPU runs (AMX
// tiles, and vdpbf16ps under MEMO_CPU_ISA=avx512_bf16; Note [AMX tiles for attention]) against the
// float64 reference (attention_reference.h) within a bound derived from bf16 rounding, of its
// determinism over runs and thread counts, and of its refusals. Skipped where the CPU has no
// AVX512-BF16 (or MEMO_CPU_ISA caps it away): there bf16 attention widens to the f32 kernel, which
// attention_test.cc checks.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/kernels.h"
#include "reference/attention_reference.h"
#include "test_util.h"

namespace memo::cpu {
namespace {

constexpr double kUnitRoundoffBf16 = 1.0 / 256;  // u = 2^-8: round to nearest with 8 bits

enum class Bf16Mask { kCausal, kFull, kDocuments, kWindow17, kFullWithStarts };

struct Bf16AttnCase {
  const char* name;
  int64_t B, S, H, Hkv, D;
  Bf16Mask mask;
};

void PrintTo(const Bf16AttnCase& c, std::ostream* out) { *out << c.name; }

// key_start of one sequence (every sequence of the batch shares it), or empty.
std::vector<int32_t> bf16_case_key_start(Bf16Mask mask, int64_t S) {
  std::vector<int32_t> ks(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    int32_t& k = ks[size_t(i)];
    switch (mask) {
      case Bf16Mask::kDocuments:  // documents of 64, 64, 1, 1 rows, then one to the end
        k = i < 64 ? 0 : i < 128 ? 64 : i < 129 ? 128 : i < 130 ? 129 : 130;
        break;
      case Bf16Mask::kWindow17:
        k = int32_t(i - 16);
        break;
      case Bf16Mask::kFullWithStarts:
        k = int32_t(i < 30 ? -5 : i < 90 ? i - 20 : S + 3);
        break;
      default:
        return {};
    }
  }
  return ks;
}

// One case's bf16 tensors, their float64 copies, the reference's outputs and, for the bound, the
// sums of magnitudes each output element is made of.
struct Bf16AttnData {
  Bf16AttnCase c;
  int64_t T, qc, kc;
  std::vector<bf16> q, k, v, dout, o, dq, dk, dv;
  std::vector<float> lse, scratch;
  std::vector<int32_t> key_start;
  std::vector<double> q64, k64, v64, dout64, o64, lse64, dq64, dk64, dv64;
  // |terms| of each output: o: sum_j p|v|; dv: sum_i p|dO|; dq, dk: sum |ds||k| / sqrt(D) and
  // sum |ds||q| / sqrt(D); and dq_ext, dk_ext: what the error of delta (from the rounded o)
  // moves them by.
  std::vector<double> o_abs, dv_abs, dq_abs, dk_abs, dq_ext, dk_ext;

  Bf16AttnData(const Bf16AttnCase& cs, uint32_t seed)
      : c(cs), T(cs.B * cs.S), qc(cs.H * cs.D), kc(cs.Hkv * cs.D) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<bf16>& x, std::vector<double>& x64, int64_t n) {
      x.resize(size_t(n));
      x64.resize(size_t(n));
      for (int64_t e = 0; e < n; ++e) {
        x[size_t(e)] = float_to_bf16(normal(rng));
        x64[size_t(e)] = bf16_to_float(x[size_t(e)]);
      }
    };
    fill(q, q64, T * qc);
    fill(k, k64, T * kc);
    fill(v, v64, T * kc);
    fill(dout, dout64, T * qc);
    o.assign(size_t(T * qc), bf16{});
    dq.assign(size_t(T * qc), bf16{});
    dk.assign(size_t(T * kc), bf16{});
    dv.assign(size_t(T * kc), bf16{});
    lse.assign(size_t(c.B * c.H * c.S), 0.0f);
    for (int64_t b = 0; b < c.B; ++b) {
      const std::vector<int32_t> one = bf16_case_key_start(c.mask, c.S);
      key_start.insert(key_start.end(), one.begin(), one.end());
    }
  }

  AttnMask mask() const {
    const bool causal = c.mask != Bf16Mask::kFull && c.mask != Bf16Mask::kFullWithStarts;
    return {causal, View<const int32_t>(key_start.data(), {int64_t(key_start.size())})};
  }

  void run_kernels() {
    scratch.assign(size_t(std::max(attention_bf16_forward_scratch_numel(c.D, c.H, c.Hkv),
                                   attention_bf16_backward_scratch_numel(c.S, c.D, c.H, c.Hkv))),
                   0.0f);
    const Tensor s(scratch.data(), {int64_t(scratch.size())});
    const Tensor lse_t(lse.data(), {c.B, c.H, c.S});
    attention_bf16_forward(View<bf16>(o.data(), {T, qc}), lse_t,
                           View<const bf16>(q.data(), {T, qc}), View<const bf16>(k.data(), {T, kc}),
                           View<const bf16>(v.data(), {T, kc}), c.B, c.H, c.Hkv, s, mask());
    attention_bf16_backward(View<bf16>(dq.data(), {T, qc}), View<bf16>(dk.data(), {T, kc}),
                            View<bf16>(dv.data(), {T, kc}), View<const bf16>(dout.data(), {T, qc}),
                            View<const bf16>(q.data(), {T, qc}),
                            View<const bf16>(k.data(), {T, kc}),
                            View<const bf16>(v.data(), {T, kc}),
                            View<const bf16>(o.data(), {T, qc}), lse_t, c.B, c.H, c.Hkv, s, mask());
  }

  void run_reference() {
    o64.assign(size_t(T * qc), 0.0);
    lse64.assign(size_t(c.B * c.H * c.S), 0.0);
    dq64.assign(size_t(T * qc), 0.0);
    dk64.assign(size_t(T * kc), 0.0);
    dv64.assign(size_t(T * kc), 0.0);
    attention_forward_ref(
        View<double>(o64.data(), {T, qc}), View<double>(lse64.data(), {c.B, c.H, c.S}),
        View<const double>(q64.data(), {T, qc}), View<const double>(k64.data(), {T, kc}),
        View<const double>(v64.data(), {T, kc}), c.B, c.H, c.Hkv, mask());
    attention_backward_ref(
        View<double>(dq64.data(), {T, qc}), View<double>(dk64.data(), {T, kc}),
        View<double>(dv64.data(), {T, kc}), View<const double>(dout64.data(), {T, qc}),
        View<const double>(q64.data(), {T, qc}), View<const double>(k64.data(), {T, kc}),
        View<const double>(v64.data(), {T, kc}), c.B, c.H, c.Hkv, mask());
  }

  // The magnitudes, by the naive float64 loop over every visible (query, key) pair.
  void sum_magnitudes() {
    const int64_t D = c.D, G = c.H / c.Hkv;
    const double inv_sqrt_d = 1.0 / std::sqrt(double(D)), u = kUnitRoundoffBf16;
    const bool causal = mask().causal;
    o_abs.assign(size_t(T * qc), 0.0);
    dq_abs.assign(size_t(T * qc), 0.0);
    dq_ext.assign(size_t(T * qc), 0.0);
    dv_abs.assign(size_t(T * kc), 0.0);
    dk_abs.assign(size_t(T * kc), 0.0);
    dk_ext.assign(size_t(T * kc), 0.0);
    std::vector<double> p(size_t(c.S)), dp(size_t(c.S));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.S; ++i) {
          const int64_t qi = (b * c.S + i) * qc + h * D, hk = h / G;
          const int64_t lo = key_start.empty() ? 0 : std::max<int64_t>(0, key_start[b * c.S + i]);
          const int64_t hi = causal ? i + 1 : c.S;
          if (lo >= hi) continue;
          double m = -INFINITY, sum = 0.0;
          auto key = [&](int64_t j) { return (b * c.S + j) * kc + hk * D; };
          for (int64_t j = lo; j < hi; ++j) {
            double sc = 0.0;
            for (int64_t d = 0; d < D; ++d) sc += q64[qi + d] * k64[key(j) + d];
            p[j] = sc * inv_sqrt_d;
            m = std::max(m, p[j]);
          }
          for (int64_t j = lo; j < hi; ++j) sum += p[j] = std::exp(p[j] - m);
          double delta = 0.0, delta_err = 0.0;
          for (int64_t j = lo; j < hi; ++j) {
            p[j] /= sum;
            dp[j] = 0.0;
            for (int64_t d = 0; d < D; ++d) {
              dp[j] += dout64[qi + d] * v64[key(j) + d];
              o_abs[qi + d] += p[j] * std::abs(v64[key(j) + d]);
            }
            delta += p[j] * dp[j];
          }
          // the kernel's delta reads the bf16 o, off by the forward's bound below
          for (int64_t d = 0; d < D; ++d)
            delta_err += std::abs(dout64[qi + d]) * 2.0 * u * o_abs[qi + d];
          for (int64_t j = lo; j < hi; ++j) {
            const double ds = std::abs(p[j] * (dp[j] - delta)), ext = p[j] * delta_err;
            for (int64_t d = 0; d < D; ++d) {
              const int64_t kj = key(j) + d;
              dq_abs[qi + d] += ds * std::abs(k64[kj]) * inv_sqrt_d;
              dq_ext[qi + d] += ext * std::abs(k64[kj]) * inv_sqrt_d;
              dk_abs[kj] += ds * std::abs(q64[qi + d]) * inv_sqrt_d;
              dk_ext[kj] += ext * std::abs(q64[qi + d]) * inv_sqrt_d;
              dv_abs[kj] += p[j] * std::abs(dout64[qi + d]);
            }
          }
        }
  }
};

// Each product rounds one factor (P, dS) to bf16, relative error <= u per term, so it is off by
// at most u * sum |terms|; rounding the output adds u |x| <= u sum |terms|. f32 accumulation and
// the Cephes exp add ~1e-6 relative, covered by the 1e-4 * sum |terms| + 1e-6 slack. ext: the
// error a term's inputs already carry (delta's, from the bf16 o). Returns the largest
// |got - want| / bound, which must stay below 1.
double worst_ratio(const std::vector<bf16>& got, const std::vector<double>& want,
                   const std::vector<double>& abs, const std::vector<double>* ext) {
  double worst = 0.0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double bound = (2.0 * kUnitRoundoffBf16 + 1e-4) * abs[e] + (ext ? (*ext)[e] : 0.0) + 1e-6;
    worst = std::max(worst, std::abs(double(bf16_to_float(got[e])) - want[e]) / bound);
  }
  return worst;
}

bool skip_without_bf16_attention() { return !bf16_attention_native(); }

// The MEMO_CPU_ISA caps that run each product path of this CPU: none (AMX tiles where it has them,
// else vdpbf16ps), and avx512_bf16 (vdpbf16ps) where the first is AMX. bf16_attention_native()
// is asked first, so the cap oneDNN takes once is the environment's, not a test's.
std::vector<std::string> bf16_attention_caps() {
  std::vector<std::string> caps{""};
  if (bf16_attention_native() && bf16_attention_on_amx()) caps.emplace_back("avx512_bf16");
  return caps;
}

class Bf16AttentionVsReference : public ::testing::TestWithParam<Bf16AttnCase> {};

TEST_P(Bf16AttentionVsReference, within_the_bf16_rounding_bound_of_float64) {
  if (skip_without_bf16_attention()) GTEST_SKIP() << bf16_attention_name();
  Bf16AttnData data(GetParam(), 7);
  data.run_reference();
  for (const std::string& cap : bf16_attention_caps())
    test::with_isa_cap(cap, [&] {
      SCOPED_TRACE(bf16_attention_name());
      if (!cap.empty()) {
        EXPECT_FALSE(bf16_attention_on_amx());  // the dispatch follows the cap
      }
      data.run_kernels();
      data.sum_magnitudes();
      EXPECT_LT(worst_ratio(data.o, data.o64, data.o_abs, nullptr), 1.0);
      EXPECT_LT(worst_ratio(data.dv, data.dv64, data.dv_abs, nullptr), 1.0);
      EXPECT_LT(worst_ratio(data.dq, data.dq64, data.dq_abs, &data.dq_ext), 1.0);
      EXPECT_LT(worst_ratio(data.dk, data.dk64, data.dk_abs, &data.dk_ext), 1.0);
      for (size_t e = 0; e < data.lse.size(); ++e) {  // f32 statistics: the f32 kernel's tolerance
        if (data.lse64[e] == -INFINITY) {
          EXPECT_EQ(data.lse[e], -INFINITY) << "lse " << e;
          continue;
        }
        EXPECT_LT(std::abs(data.lse[e] - data.lse64[e]), 2e-5 * (1.0 + std::abs(data.lse64[e])))
            << "lse " << e;
      }
    });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16AttentionVsReference,
    ::testing::Values(Bf16AttnCase{"one_partial_tile", 1, 40, 2, 1, 16, Bf16Mask::kCausal},
                      Bf16AttnCase{"gqa_over_tiles", 2, 200, 4, 2, 64, Bf16Mask::kCausal},
                      Bf16AttnCase{"head_dim_24_padded", 1, 130, 3, 3, 24, Bf16Mask::kCausal},
                      Bf16AttnCase{"head_dim_8", 1, 100, 2, 1, 8, Bf16Mask::kCausal},
                      Bf16AttnCase{"head_dim_7_odd", 1, 70, 2, 1, 7, Bf16Mask::kCausal},
                      Bf16AttnCase{"head_dim_80", 1, 70, 2, 2, 80, Bf16Mask::kCausal},
                      Bf16AttnCase{"head_dim_128", 1, 150, 2, 1, 128, Bf16Mask::kCausal},
                      Bf16AttnCase{"full", 2, 130, 4, 2, 32, Bf16Mask::kFull},
                      Bf16AttnCase{"documents", 1, 200, 4, 2, 16, Bf16Mask::kDocuments},
                      Bf16AttnCase{"window_17", 1, 150, 4, 1, 24, Bf16Mask::kWindow17},
                      Bf16AttnCase{"full_with_starts", 2, 130, 4, 2, 16,
                                   Bf16Mask::kFullWithStarts}),
    [](const auto& info) { return std::string(info.param.name); });

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

// Note [Attention threads and determinism]: the same bits on every run and thread count, on each
// product path.
TEST(Bf16Attention, repeats_bit_for_bit_over_runs_and_thread_counts) {
  if (skip_without_bf16_attention()) GTEST_SKIP() << bf16_attention_name();
  const Bf16AttnCase c{"repeat", 2, 150, 4, 2, 32, Bf16Mask::kDocuments};
  for (const std::string& cap : bf16_attention_caps())
    test::with_isa_cap(cap, [&] {
      SCOPED_TRACE(bf16_attention_name());
      Bf16AttnData first(c, 9), again(c, 9), one_thread(c, 9);
      first.run_kernels();
      again.run_kernels();
      test::with_threads(1, [&] { one_thread.run_kernels(); });
      for (const Bf16AttnData* other : {&again, &one_thread}) {
        EXPECT_TRUE(same_bits(first.o, other->o));
        EXPECT_TRUE(same_bits(first.dq, other->dq));
        EXPECT_TRUE(same_bits(first.dk, other->dk));
        EXPECT_TRUE(same_bits(first.dv, other->dv));
        EXPECT_EQ(0, std::memcmp(first.lse.data(), other->lse.data(), first.lse.size() * 4));
      }
    });
}

// Note [Attention threads and determinism]: forward items of 4, 2 and 1 heads of a kv head (1, 2
// and 3 threads at S 256, G 4) give the same bits, on each product path.
TEST(Bf16Attention, forward_items_of_one_two_or_four_heads_give_the_same_bits) {
  if (skip_without_bf16_attention()) GTEST_SKIP() << bf16_attention_name();
  const Bf16AttnCase c{"item heads", 1, 256, 4, 1, 40, Bf16Mask::kDocuments};
  for (const std::string& cap : bf16_attention_caps())
    test::with_isa_cap(cap, [&] {
      SCOPED_TRACE(bf16_attention_name());
      Bf16AttnData four(c, 12), two(c, 12), one(c, 12);
      test::with_threads(1, [&] { four.run_kernels(); });
      test::with_threads(2, [&] { two.run_kernels(); });
      test::with_threads(3, [&] { one.run_kernels(); });
      for (const Bf16AttnData* other : {&two, &one}) {
        EXPECT_TRUE(same_bits(four.o, other->o));
        EXPECT_EQ(0, std::memcmp(four.lse.data(), other->lse.data(), four.lse.size() * 4));
      }
    });
}

// Note [Group scratch]: the by-group backward (dq accumulated in f32 in the group scratch) and the
// split one (dq per query tile, recomputing P and dS) give the same bits, on each product path.
// B * Hkv = 3 groups take the split scheme on 2 threads and the by-group one on 1.
TEST(Bf16Attention, by_group_and_split_backwards_give_the_same_bits) {
  if (skip_without_bf16_attention()) GTEST_SKIP() << bf16_attention_name();
  for (const std::string& cap : bf16_attention_caps())
    test::with_isa_cap(cap, [&] {
      SCOPED_TRACE(bf16_attention_name());
      for (Bf16Mask mask : {Bf16Mask::kCausal, Bf16Mask::kDocuments, Bf16Mask::kFull}) {
        const Bf16AttnCase c{"schemes", 3, 150, 4, 1, 24, mask};
        Bf16AttnData split(c, 11), by_group(c, 11);
        test::with_threads(2, [&] { split.run_kernels(); });
        test::with_threads(1, [&] { by_group.run_kernels(); });
        EXPECT_TRUE(same_bits(split.dq, by_group.dq)) << int(mask);
        EXPECT_TRUE(same_bits(split.dk, by_group.dk)) << int(mask);
        EXPECT_TRUE(same_bits(split.dv, by_group.dv)) << int(mask);
      }
    });
}

TEST(Bf16Attention, refuses_an_f32_tensor_and_small_scratch_by_name) {
  if (skip_without_bf16_attention()) GTEST_SKIP() << bf16_attention_name();
  Bf16AttnData data({"refusals", 1, 64, 2, 1, 16, Bf16Mask::kCausal}, 3);
  std::vector<float> o32(size_t(data.T * data.qc)), scratch(8);
  const Tensor lse(data.lse.data(), {1, 2, 64});
  const View<const bf16> q(data.q.data(), {64, 32}), k(data.k.data(), {64, 16}),
      v(data.v.data(), {64, 16});
  std::vector<float> big(size_t(attention_bf16_forward_scratch_numel(16, 2, 1)));
  try {
    attention_bf16_forward(Tensor(o32.data(), {64, 32}), lse, q, k, v, 1, 2, 1,
                           Tensor(big.data(), {int64_t(big.size())}));
    ADD_FAILURE() << "an f32 o was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32 tensor [64, 32] where bf16 is needed"),
              std::string::npos)
        << e.what();
  }
  try {
    attention_bf16_forward(View<bf16>(data.o.data(), {64, 32}), lse, q, k, v, 1, 2, 1,
                           Tensor(scratch.data(), {8}));
    ADD_FAILURE() << "a small scratch was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_bf16_forward: scratch has 8 floats"),
              std::string::npos)
        << e.what();
  }
}

// The CPU's AMX tile bits (CPUID leaf 7: AMX-BF16, AMX-TILE).
bool cpu_has_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0;
}

// Run by the test below in a process of its own (the first request for the tiles is the one
// Linux answers): a sigaltstack too small for the AMX signal frame, installed before memo asks,
// makes Linux refuse the tiles; memo then says why and runs attention without them.
TEST(AmxRefusal, child_with_a_small_sigaltstack) {
  if (std::getenv("MEMO_AMX_REFUSAL_CHILD") == nullptr)
    GTEST_SKIP() << "run by AmxRefusal.a_refused_request_is_named in a process of its own";
  static std::vector<char> stack(4096);
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  ASSERT_EQ(sigaltstack(&ss, nullptr), 0);
  const std::string why = amx_refusal();
  EXPECT_NE(why.find("Linux refused them"), std::string::npos) << why;
  EXPECT_NE(why.find("sigaltstack"), std::string::npos) << why;
  EXPECT_FALSE(bf16_attention_on_amx());
  // oneDNN asks for the tiles itself, is refused as well, and picks its AVX512-BF16 kernels
  EXPECT_EQ(std::string(bf16_products_name()).find("amx"), std::string::npos)
      << bf16_products_name();
  EXPECT_NE(cpu_backend().describe().find(why), std::string::npos);  // the start-up line
  if (bf16_attention_native()) {
    EXPECT_STREQ(bf16_attention_name(), "bf16 attention on AVX512-BF16 (vdpbf16ps)");
  }
}

TEST(AmxRefusal, a_refused_request_is_named) {
  if (!cpu_has_amx()) GTEST_SKIP() << "this CPU has no AMX tiles";
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const test::CommandResult r =
      test::run_command(str("MEMO_AMX_REFUSAL_CHILD=1 '", self,
                            "' --gtest_filter=AmxRefusal.child_with_a_small_sigaltstack"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
  // this process's own answer (granted, unless a sanitizer's runtime installed a small stack
  // first) is named on the start-up line exactly when it is a refusal
  EXPECT_EQ(amx_refusal().empty(), cpu_backend().describe().find("refused") == std::string::npos);
}

}  // namespace
}  // namespace memo::cpu
