// The backend conformance suite: see conformance.h. Each op names its tensors (shape, dtype,
// whether it is an output the comparison reads) and one call; the harness fills the same seeded
// values into tensors of the backend under test and of cpu_backend(), runs the call on each, and
// compares every output and the returned value. Shapes are awkward on purpose: primes, one row
// past a 128-row token panel, head dims that are not a power of two.
#include "backend/conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "memo/backend/raw_allocator.h"
#include "memo/core/dtype.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"

namespace memo::test {

std::vector<ConformanceBackend>& registry() {
  static std::vector<ConformanceBackend> backends;
  return backends;
}

bool register_conformance_backend(ConformanceBackend backend) {
  registry().push_back(std::move(backend));
  return true;
}

const std::vector<ConformanceBackend>& conformance_backends() { return registry(); }

namespace {

// Promise::kTolerance, relative to max(1, max |CPU output|) per tensor, with O(1) inputs: the
// longest sum of the suite has 133 terms (the token-panel rows are not summed; K, C, V, S are at
// most 64), so another f32 summation order moves a result by at most ~64 u = 4e-6 of the sum of
// magnitudes; the transcendental functions (exp, log, tanh, rsqrt: a few ulp each) and the
// attention backward's use of the forward's outputs add a small multiple. 1e-4 leaves 25x.
constexpr double kTolerance = 1e-4;

// The dimensions (legend of STYLE.md): primes where a kernel tiles or vectorises.
constexpr int64_t T = 37, C = 13, F = 19, V = 23;

struct Arg {
  Shape shape;
  bool out = false;       // compared after the call (outputs and accumulators)
  bool positive = false;  // values in [0.5, 1.5) (second moments, 1 / rms), else [-1, 1)
  DType dtype = DType::kF32;
};

// One call: the tensors in Arg order; returns a reduction's value, or 0.
using Call = std::function<double(Backend&, std::vector<Tensor>&)>;

struct Op {
  std::string name;
  std::vector<Arg> args;
  Call call;
};

// Scratch of `n` elements of `bytes` each in b's device space, held for one call.
struct Scratch {
  Scratch(Backend& b, int64_t n, int64_t bytes = 4)
      : buf(b.allocator(b.device_space()), std::max<int64_t>(n, 1) * bytes, "conformance scratch"),
        numel(std::max<int64_t>(n, 1)) {}
  Tensor floats() { return buf.tensor({numel}, DType::kF32); }
  View<double> doubles() { return View<double>(static_cast<double*>(buf.data()), {numel}); }
  RawBuffer buf;
  int64_t numel;
};

std::vector<int32_t> ids(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = int32_t(rng() % uint64_t(vocab));
  return v;
}
const std::vector<int32_t> kTokens = ids(T, int32_t(V), 7);

Call attention(AttnMask mask, int64_t B, int64_t H, int64_t Hkv) {
  return [=](Backend& b, std::vector<Tensor>& t) {
    const int64_t S = t[2].rows() / B, D = t[2].cols() / H;
    Scratch fs(b, b.attention_forward_scratch_numel(S, D, H, Hkv));
    Scratch bs(b, b.attention_backward_scratch_numel(S, D, H, Hkv));
    b.attention_forward(t[0], t[1], t[2], t[3], t[4], B, H, Hkv, fs.floats(), mask);
    b.attention_backward(t[5], t[6], t[7], t[8], t[2], t[3], t[4], t[0], t[1], B, H, Hkv,
                         bs.floats(), mask);
    return 0.0;
  };
}

// attention()'s tensors for B sequences of S rows: o and lse (written), q, k and v, dq, dk and dv
// (written), dout.
std::vector<Arg> attention_args(int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D) {
  const int64_t rows = B * S;
  return {{{rows, H * D}, true},   {{B, H, S}, true},       {{rows, H * D}},
          {{rows, Hkv * D}},       {{rows, Hkv * D}},       {{rows, H * D}, true},
          {{rows, Hkv * D}, true}, {{rows, Hkv * D}, true}, {{rows, H * D}}};
}

// Two sequences of 7 packed with documents (backend/attn_mask.h): the first keys of each row.
const std::vector<int32_t> kDocStarts = {0, 0, 0, 3, 3, 3, 3, 0, 0, 2, 2, 2, 5, 5};

std::vector<Op> kernel_ops() {
  const Arg out_tc{{T, C}, true};
  std::vector<Op> ops = {
      {"matmul",
       {{{7, 5}, true}, {{7, 11}}, {{11, 5}}},
       [](Backend& b, auto& t) {
         return b.matmul(t[0], t[1], t[2], false, false, 0.5f, 0.25f), 0.0;
       }},
      {"matmul_trans_a",
       {{{7, 5}, true}, {{11, 7}}, {{11, 5}}},
       [](Backend& b, auto& t) {
         return b.matmul(t[0], t[1], t[2], true, false, 1.0f, 0.0f), 0.0;
       }},
      {"matmul_trans_b",
       {{{7, 5}, true}, {{7, 11}}, {{5, 11}}},
       [](Backend& b, auto& t) {
         return b.matmul(t[0], t[1], t[2], false, true, 1.0f, 1.0f), 0.0;
       }},
      {"matmul_token_panels",
       {{{133, 5}, true}, {{133, 11}}, {{5, 11}}},
       [](Backend& b, auto& t) { return b.matmul_token_panels(t[0], t[1], t[2], 1.0f), 0.0; }},
      {"matmul_token_panels_kn",
       {{{133, 5}, true}, {{133, 11}}, {{11, 5}}},
       [](Backend& b, auto& t) { return b.matmul_token_panels_kn(t[0], t[1], t[2], 0.0f), 0.0; }},
      {"rmsnorm_forward",
       {out_tc, {{T}, true}, {{T, C}}, {{C}}},
       [](Backend& b, auto& t) { return b.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f), 0.0; }},
      {"rmsnorm_backward",
       {out_tc, {{C}, true}, {{T, C}}, {{T, C}}, {{C}}, {{T}, false, true}},
       [](Backend& b, auto& t) {
         return b.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]), 0.0;
       }},
      {"layernorm_forward",
       {out_tc, {{T}, true}, {{T}, true}, {{T, C}}, {{C}}, {{C}}},
       [](Backend& b, auto& t) {
         return b.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f), 0.0;
       }},
      {"layernorm_backward",
       {out_tc, {{C}, true}, {{C}, true}, {{T, C}}, {{T, C}}, {{C}}, {{T}}, {{T}, false, true}},
       [](Backend& b, auto& t) {
         return b.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]), 0.0;
       }},
      {"rope_table",
       {{{9, 3}, true}, {{9, 3}, true}},
       [](Backend& b, auto& t) {
         return b.rope_table(t[0], t[1], rope_inv_freq(6, 10000.0)), 0.0;
       }},
      {"rope_forward",
       {{{T, 12}, true}, {{40, 3}}, {{40, 3}}},
       [](Backend& b, auto& t) { return b.rope_forward(t[0], t[1], t[2], 6, 3), 0.0; }},
      {"rope_backward",
       {{{T, 12}, true}, {{40, 3}}, {{40, 3}}},
       [](Backend& b, auto& t) { return b.rope_backward(t[0], t[1], t[2], 6, 0), 0.0; }},
      {"swiglu_forward",
       {{{T, F}, true}, {{T, F}}, {{T, F}}},
       [](Backend& b, auto& t) { return b.swiglu_forward(t[0], t[1], t[2]), 0.0; }},
      {"swiglu_backward",
       {{{T, F}, true}, {{T, F}, true}, {{T, F}}, {{T, F}}, {{T, F}}},
       [](Backend& b, auto& t) { return b.swiglu_backward(t[0], t[1], t[2], t[3], t[4]), 0.0; }},
      {"gelu_forward",
       {out_tc, {{T, C}}},
       [](Backend& b, auto& t) { return b.gelu_forward(t[0], t[1]), 0.0; }},
      {"gelu_backward",
       {out_tc, {{T, C}}, {{T, C}}},
       [](Backend& b, auto& t) { return b.gelu_backward(t[0], t[1], t[2]), 0.0; }},
      {"bias_add",
       {out_tc, {{C}}},
       [](Backend& b, auto& t) { return b.bias_add(t[0], t[1]), 0.0; }},
      {"bias_backward",
       {{{C}, true}, {{T, C}}},
       [](Backend& b, auto& t) { return b.bias_backward(t[0], t[1]), 0.0; }},
      {"embedding_forward",
       {out_tc, {{V, C}}},
       [](Backend& b, auto& t) {
         return b.embedding_forward(t[0], View<const int32_t>(kTokens.data(), {T}), t[1]), 0.0;
       }},
      {"embedding_backward",
       {{{V, C}, true}, {{T, C}}},
       [](Backend& b, auto& t) {
         return b.embedding_backward(t[0], t[1], View<const int32_t>(kTokens.data(), {T})), 0.0;
       }},
      {"cross_entropy",
       {{{T}, true}, {{T, V}, true}, {{T, V}}},
       [](Backend& b, auto& t) {
         b.cross_entropy(t[0], t[1], t[2], View<const int32_t>(kTokens.data(), {T}), 0.5f);
         return 0.0;
       }},
      {"vocab_parallel_ce",
       {{{2, T}, true}, {{T}, true}, {{T}, true}, {{T, V}, true}, {{T, V}}},
       [](Backend& b, auto& t) {
         const View<const int32_t> y(kTokens.data(), {T});
         b.vocab_parallel_ce_stats(t[0], t[1], t[4], y);
         b.vocab_parallel_ce(t[2], t[3], t[4], y, t[0], t[1], 0.25f);
         return 0.0;
       }},
      {"attention_causal_gqa", attention_args(2, 7, 4, 2, 8),
       attention(AttnMask::kCausal, 2, 4, 2)},
      {"attention_causal_documents", attention_args(2, 7, 4, 2, 8),
       attention(AttnMask::causal_from(View<const int32_t>(kDocStarts.data(), {14})), 2, 4, 2)},
      {"attention_full_d6", attention_args(1, 5, 3, 3, 6), attention(AttnMask::kFull, 1, 3, 3)},
      {"attention_merge",
       {{{14, 32}, true}, {{2, 4, 7}, true}, {{14, 32}}, {{2, 4, 7}}},
       [](Backend& b, auto& t) { return b.attention_merge(t[0], t[1], t[2], t[3]), 0.0; }},
      {"attention_decode",
       {{{3, 32}, true}, {{3, 32}}, {{8, 16}}, {{8, 16}}},
       [](Backend& b, auto& t) {
         Scratch s(b, b.attention_decode_scratch_numel(8));
         return b.attention_decode(t[0], t[1], t[2], t[3], 5, 4, 2, s.floats()), 0.0;
       }},
      {"copy", {out_tc, {{T, C}}}, [](Backend& b, auto& t) { return b.copy(t[0], t[1]), 0.0; }},
      {"convert_to_bf16",
       {{{T * C}, true, false, DType::kBF16}, {{T * C}}},
       [](Backend& b, auto& t) { return b.convert(t[0], t[1]), 0.0; }},
      {"convert_from_bf16",
       {{{T * C}, true}, {{T * C}, false, false, DType::kBF16}},
       [](Backend& b, auto& t) { return b.convert(t[0], t[1]), 0.0; }},
      {"fill", {out_tc}, [](Backend& b, auto& t) { return b.fill(t[0], 0.75f), 0.0; }},
      {"scale", {out_tc}, [](Backend& b, auto& t) { return b.scale(t[0], 1.5f), 0.0; }},
      {"add_into",
       {out_tc, {{T, C}}},
       [](Backend& b, auto& t) { return b.add_into(t[0], t[1]), 0.0; }},
      {"sum", {{{T, C}}}, [](Backend& b, auto& t) { return b.sum(t[0]); }},
      {"sum_squares", {{{1500}}}, [](Backend& b, auto& t) { return b.sum_squares(t[0]); }},
      {"noise_probe_pass",
       {{{1500}, true}, {{1500}, true}},
       [](Backend& b, auto& t) {
         Scratch s(b, b.noise_probe_partial_numel(1500), 8);
         return b.noise_probe_pass(t[0], t[1], NoiseProbePass::kMiddle, s.doubles());
       }},
  };
  return ops;
}

std::vector<Op> optimizer_ops() {
  constexpr int64_t n = 1500, R = 6, Cm = 9;
  const Arg p{{n}, true}, state{{n}, true}, pos{{n}, true, true}, g{{n}};
  auto k = [](Backend& b) -> OptimizerKernels& { return b.optimizer_kernels(); };
  return {
      {"sgd_update",
       {p, state, g},
       [=](Backend& b, auto& t) {
         return k(b).sgd_update(t[0], t[1], t[2], {0.1f, 0.01f, 0.9f, 0.9f, true, false}), 0.0;
       }},
      {"signsgd_update",
       {p, state, g},
       [=](Backend& b, auto& t) {
         return k(b).signsgd_update(t[0], t[1], t[2], {0.1f, 0.99f, 0.9f}), 0.0;
       }},
      {"adam_update",
       {p, state, pos, g},
       [=](Backend& b, auto& t) {
         return k(b).adam_update(t[0], t[1], t[2], t[3],
                                 {0.9f, 0.99f, 1e-8f, 0.1f, 0.3f, 0.01f, 1.0f}),
                0.0;
       }},
      {"adamw_update",
       {p, state, pos, g},
       [=](Backend& b, auto& t) {
         return k(b).adamw_update(t[0], t[1], t[2], t[3],
                                  {0.9f, 0.99f, 1e-8f, 0.1f, 0.3f, 0.0f, 0.999f}),
                0.0;
       }},
      {"adagrad_update",
       {p, pos, g},
       [=](Backend& b, auto& t) {
         return k(b).adagrad_update(t[0], t[1], t[2], {0.1f, 1e-10f, 0.01f}), 0.0;
       }},
      {"rmsprop_update",
       {p, pos, state, state, g},
       [=](Backend& b, auto& t) {
         return k(b).rmsprop_update(t[0], t[1], t[2], t[3], t[4],
                                    {0.01f, 0.99f, 1e-8f, 0.9f, 0.0f, false}),
                0.0;
       }},
      {"lion_update",
       {p, state, g},
       [=](Backend& b, auto& t) {
         return k(b).lion_update(t[0], t[1], t[2], {0.1f, 0.9f, 0.99f, 0.999f}), 0.0;
       }},
      {"adafactor_rms",
       {g},
       [=](Backend& b, auto& t) {
         Scratch s(b, k(b).adafactor_partial_numel(0, n), 8);
         return k(b).adafactor_rms(t[0], s.doubles());
       }},
      {"adafactor_update_matrix",
       {{{R, Cm}, true},
        {{R, Cm}, true},
        {{R}, true, true},
        {{Cm}, true, true},
        {{R, Cm}},
        {{R}},
        {{Cm}}},
       [=](Backend& b, auto& t) {
         Scratch s(b, k(b).adafactor_partial_numel(R, R * Cm), 8);
         k(b).adafactor_update_matrix(t[0], t[1], t[2], t[3], t[4], t[5], t[6], s.doubles(),
                                      {0.9f, 1e-30f, 0.01f, 1.0, 0.9f, 0.999f});
         return 0.0;
       }},
      {"adafactor_update_vector",
       {p, state, pos, g},
       [=](Backend& b, auto& t) {
         Scratch s(b, k(b).adafactor_partial_numel(0, n), 8);
         k(b).adafactor_update_vector(t[0], t[1], t[2], t[3], s.doubles(),
                                      {0.9f, 1e-30f, 0.01f, 1.0, 0.0f, 1.0f});
         return 0.0;
       }},
  };
}

// The op's tensors on backend b, filled with the op's seeded values.
struct Tensors {
  Tensors(Backend& b, const Op& op, uint64_t seed) {
    for (size_t i = 0; i < op.args.size(); ++i) {
      const Arg& a = op.args[i];
      const int64_t n = a.shape.numel(), bytes = n * dtype_bytes(a.dtype);
      std::mt19937_64 rng(seed * 131 + i);
      std::uniform_real_distribution<float> u(a.positive ? 0.5f : -1.0f, a.positive ? 1.5f : 1.0f);
      std::vector<float> f(static_cast<size_t>(n));
      for (float& x : f) x = u(rng);
      std::vector<uint8_t> host(static_cast<size_t>(bytes));
      if (a.dtype == DType::kBF16)
        for (int64_t j = 0; j < n; ++j)
          reinterpret_cast<bf16*>(host.data())[j] = float_to_bf16(f[size_t(j)]);
      else
        std::memcpy(host.data(), f.data(), size_t(bytes));
      bufs.emplace_back(b.allocator(b.device_space()), bytes, "conformance tensor");
      b.copy_from_host(bufs.back().data(), host.data(), bytes);
      tensors.push_back(bufs.back().tensor(a.shape, a.dtype));
    }
  }
  // The bytes of output i, read back through b.
  std::vector<uint8_t> read(Backend& b, size_t i) const {
    std::vector<uint8_t> host(static_cast<size_t>(tensors[i].bytes()));
    b.copy_to_host(host.data(), tensors[i].data(), tensors[i].bytes());
    return host;
  }
  std::vector<RawBuffer> bufs;
  std::vector<Tensor> tensors;
};

std::vector<double> as_doubles(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<double> v;
  if (dtype == DType::kBF16) {
    for (size_t j = 0; j < bytes.size() / 2; ++j)
      v.push_back(bf16_to_float(reinterpret_cast<const bf16*>(bytes.data())[j]));
  } else {
    for (size_t j = 0; j < bytes.size() / 4; ++j)
      v.push_back(reinterpret_cast<const float*>(bytes.data())[j]);
  }
  return v;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  double scale = 1.0, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::abs(got[j] - want[j]));
  EXPECT_LE(worst / scale, kTolerance) << what;
}

// Runs op on b and on the CPU from the same values and compares as b promises.
void check_op(Backend& b, Promise promise, const Op& op, uint64_t seed) {
  SCOPED_TRACE(op.name);
  Backend& cpu = cpu_backend();
  Tensors mine(b, op, seed), ref(cpu, op, seed);
  const double got = op.call(b, mine.tensors), want = op.call(cpu, ref.tensors);
  if (promise == Promise::kShapesOnly) return;  // it ran: no crash, no check refused it
  if (promise == Promise::kCpuBits)
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << got << " vs " << want;
  else
    expect_close({got}, {want}, "returned value");
  for (size_t i = 0; i < op.args.size(); ++i) {
    if (!op.args[i].out) continue;
    const std::vector<uint8_t> g = mine.read(b, i), w = ref.read(cpu, i);
    if (promise == Promise::kCpuBits)
      EXPECT_TRUE(g == w) << "output " << i << " differs from the CPU's bits";
    else
      expect_close(as_doubles(g, op.args[i].dtype), as_doubles(w, op.args[i].dtype),
                   "output " + std::to_string(i));
  }
}

// Calls with one mis-shaped (or out-of-vocabulary) argument: every backend must refuse each with
// the CPU's message (the entry checks are shared: Note [Checked entry points]).
std::vector<Op> bad_ops() {
  return {
      {"matmul_inner_dims",
       {{{7, 5}}, {{7, 11}}, {{10, 5}}},
       [](Backend& b, auto& t) {
         return b.matmul(t[0], t[1], t[2], false, false, 1.0f, 0.0f), 0.0;
       }},
      {"rmsnorm_weight",
       {{{T, C}}, {{T}}, {{T, C}}, {{C + 1}}},
       [](Backend& b, auto& t) { return b.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f), 0.0; }},
      {"attention_lse",
       {{{14, 32}}, {{2, 4, 6}}, {{14, 32}}, {{14, 16}}, {{14, 16}}, {{64}}},
       [](Backend& b, auto& t) {
         b.attention_forward(t[0], t[1], t[2], t[3], t[4], 2, 4, 2, t[5], AttnMask::kCausal);
         return 0.0;
       }},
      {"embedding_token",
       {{{T, C}}, {{V - 1, C}}},
       [](Backend& b, auto& t) {
         return b.embedding_forward(t[0], View<const int32_t>(kTokens.data(), {T}), t[1]), 0.0;
       }},
      {"copy_numel",
       {{{T, C}}, {{T, C - 1}}},
       [](Backend& b, auto& t) { return b.copy(t[0], t[1]), 0.0; }},
      {"adam_state",
       {{{100}}, {{99}}, {{100}}, {{100}}},
       [](Backend& b, auto& t) {
         return b.optimizer_kernels().adam_update(t[0], t[1], t[2], t[3], AdamStep{}), 0.0;
       }},
  };
}

std::string error_of(Backend& b, const Op& op) {
  Tensors t(b, op, 1);
  try {
    op.call(b, t.tensors);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class BackendConformance : public ::testing::TestWithParam<ConformanceBackend> {};

TEST_P(BackendConformance, every_kernel_matches_the_cpu) {
  const std::unique_ptr<Backend> b = GetParam().make();
  if (!b) GTEST_SKIP() << GetParam().name << " cannot run on this machine";
  uint64_t seed = 1;
  for (const Op& op : kernel_ops()) check_op(*b, GetParam().promise, op, seed++);
  for (const Op& op : optimizer_ops()) check_op(*b, GetParam().promise, op, seed++);
}

TEST_P(BackendConformance, refuses_bad_shapes_with_the_cpus_message) {
  const std::unique_ptr<Backend> b = GetParam().make();
  if (!b) GTEST_SKIP() << GetParam().name << " cannot run on this machine";
  for (const Op& op : bad_ops()) {
    SCOPED_TRACE(op.name);
    const std::string want = error_of(cpu_backend(), op);
    EXPECT_NE(want, "(no error)");
    EXPECT_EQ(error_of(*b, op), want);
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendConformance,
                         ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace memo::test
