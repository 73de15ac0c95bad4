// Benchmark of the tiled CPU attention (attention.cc): forward and backward time and memory per
// sequence length, to show memory linear in S (bytes / S flat) and time quadratic (ns / S^2
// flat), plus a speed ratio to the naive float64 reference at one small S from the same run, and
// with --documents=8,64 the time of document masks (Note [Document masks]: documents of S/8 and
// S/64 tokens) against the causal mask at each S from the same run, and with --bf16 the bf16
// kernels (attention_bf16.cc, where the CPU has AVX512-BF16) against the f32 ones at each S.
// Flags (all optional): --seqs=1024,2048,4096,8192,16384 --batch=1 --heads=8 --kv-heads=8
// --head-dim=64 --reps=1 --ref-seq=512 --documents=8,64 --bf16
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "memo/cpu/kernels.h"
#include "reference/attention_reference.h"

namespace {

using ConstTensor = memo::View<const float>;
using Tensor = memo::View<float>;

struct BenchOptions {
  std::vector<int64_t> seqs{1024, 2048, 4096, 8192, 16384};
  int64_t batch = 1, heads = 8, kv_heads = 8, head_dim = 64, reps = 1, ref_seq = 512;
  std::vector<int64_t> documents;  // documents per window of the masked runs
  bool bf16 = false;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq),
                      value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--seqs") {
      opt.seqs.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) opt.seqs.push_back(std::stoll(item));
    } else if (key == "--documents") {
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        opt.documents.push_back(std::stoll(item));
    } else if (key == "--bf16")
      opt.bf16 = true;
    else if (key == "--batch")
      opt.batch = std::stoll(value);
    else if (key == "--heads")
      opt.heads = std::stoll(value);
    else if (key == "--kv-heads")
      opt.kv_heads = std::stoll(value);
    else if (key == "--head-dim")
      opt.head_dim = std::stoll(value);
    else if (key == "--reps")
      opt.reps = std::stoll(value);
    else if (key == "--ref-seq")
      opt.ref_seq = std::stoll(value);
    else {
      std::fprintf(stderr, "unknown flag %s; see the header of bench/attention_bench.cc\n",
                   arg.c_str());
      std::exit(2);
    }
  }
  return opt;
}

// VmHWM / VmRSS of this process in bytes, from /proc/self/status (kB there).
int64_t proc_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field) + 1)) * 1024;
  return -1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// All buffers of one shape; vectors are owned here, the kernels see views.
struct AttnBuffers {
  int64_t B, S, H, Hkv, D, T;
  std::vector<float> q, k, v, o, lse, dout, dq, dk, dv, scratch;
  std::vector<int32_t> key_start;  // empty: causal; else each row's document start
  // Equal documents, `docs` to a window (the last takes the remainder).
  void set_documents(int64_t docs) {
    key_start.resize(size_t(T));
    const int64_t len = S / docs;
    for (int64_t t = 0; t < T; ++t)
      key_start[size_t(t)] = int32_t(std::min((t % S) / len, docs - 1) * len);
  }
  memo::AttnMask mask() const {
    return key_start.empty()
               ? memo::AttnMask::kCausal
               : memo::AttnMask::causal_from({key_start.data(), {int64_t(key_start.size())}});
  }
  AttnBuffers(int64_t b, int64_t s, int64_t h, int64_t hkv, int64_t d)
      : B(b), S(s), H(h), Hkv(hkv), D(d), T(b * s) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto [x, n] :
         {std::pair{&q, T * H * D}, {&k, T * Hkv * D}, {&v, T * Hkv * D}, {&dout, T * H * D}}) {
      x->resize(n);
      for (float& e : *x) e = normal(rng);
    }
    o.assign(T * H * D, 0.0f);
    dq.assign(T * H * D, 0.0f);
    dk.assign(T * Hkv * D, 0.0f);
    dv.assign(T * Hkv * D, 0.0f);
    lse.assign(B * H * S, 0.0f);
    scratch.assign(std::max(memo::cpu::attention_forward_scratch_numel(D, H, Hkv),
                            memo::cpu::attention_backward_scratch_numel(S, D, H, Hkv)),
                   0.0f);
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (auto* x : {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &scratch}) n += x->size();
    return n * int64_t(sizeof(float));
  }
  int64_t scratch_bytes() const { return int64_t(scratch.size() * sizeof(float)); }
  void forward() {
    memo::cpu::attention_forward(Tensor(o.data(), {T, H * D}), Tensor(lse.data(), {B, H, S}),
                                 ConstTensor(q.data(), {T, H * D}),
                                 ConstTensor(k.data(), {T, Hkv * D}),
                                 ConstTensor(v.data(), {T, Hkv * D}), B, H, Hkv,
                                 Tensor(scratch.data(), {int64_t(scratch.size())}), mask());
  }
  void backward() {
    memo::cpu::attention_backward(
        Tensor(dq.data(), {T, H * D}), Tensor(dk.data(), {T, Hkv * D}),
        Tensor(dv.data(), {T, Hkv * D}), ConstTensor(dout.data(), {T, H * D}),
        ConstTensor(q.data(), {T, H * D}), ConstTensor(k.data(), {T, Hkv * D}),
        ConstTensor(v.data(), {T, Hkv * D}), ConstTensor(o.data(), {T, H * D}),
        ConstTensor(lse.data(), {B, H, S}), B, H, Hkv,
        Tensor(scratch.data(), {int64_t(scratch.size())}), mask());
  }
};

// Kernel versus the naive float64 reference (one thread, full score matrix) at S = ref_seq.
void compare_to_reference(const BenchOptions& opt) {
  AttnBuffers buf(opt.batch, opt.ref_seq, opt.heads, opt.kv_heads, opt.head_dim);
  auto t0 = std::chrono::steady_clock::now();
  buf.forward();
  buf.backward();
  const double kernel_s = seconds_since(t0);
  auto to64 = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  std::vector<double> q = to64(buf.q), k = to64(buf.k), v = to64(buf.v), dout = to64(buf.dout);
  std::vector<double> o(q.size()), lse(buf.lse.size()), dq(q.size()), dk(k.size()), dv(k.size());
  const int64_t T = buf.T, qc = buf.H * buf.D, kc = buf.Hkv * buf.D;
  t0 = std::chrono::steady_clock::now();
  memo::cpu::attention_forward_ref({o.data(), {T, qc}}, {lse.data(), {buf.B, buf.H, buf.S}},
                                   {q.data(), {T, qc}}, {k.data(), {T, kc}}, {v.data(), {T, kc}},
                                   buf.B, buf.H, buf.Hkv);
  memo::cpu::attention_backward_ref(
      {dq.data(), {T, qc}}, {dk.data(), {T, kc}}, {dv.data(), {T, kc}}, {dout.data(), {T, qc}},
      {q.data(), {T, qc}}, {k.data(), {T, kc}}, {v.data(), {T, kc}}, buf.B, buf.H, buf.Hkv);
  const double ref_s = seconds_since(t0);
  std::printf(
      "baseline S=%lld: naive float64 reference fwd+bwd %.1f ms, tiled fp32 %.1f ms: %.1fx\n",
      (long long)opt.ref_seq, 1e3 * ref_s, 1e3 * kernel_s, ref_s / kernel_s);
}

// The bf16 kernels on the same (rounded) values against the f32 kernels, fwd+bwd at each S.
void compare_bf16(const BenchOptions& opt) {
  if (!memo::cpu::bf16_attention_native()) {
    std::printf("bf16: %s\n", memo::cpu::bf16_attention_name());
    return;
  }
  std::printf("bf16 kernels against f32 (fwd+bwd, same values; %s):\n%7s %10s %10s %8s\n",
              memo::cpu::bf16_attention_name(), "S", "f32_ms", "bf16_ms", "speedup");
  using memo::bf16;
  for (int64_t S : opt.seqs) {
    AttnBuffers buf(opt.batch, S, opt.heads, opt.kv_heads, opt.head_dim);
    const int64_t T = buf.T, qc = buf.H * buf.D, kc = buf.Hkv * buf.D;
    auto rounded = [](std::vector<float>& x) {
      std::vector<bf16> b(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = memo::bf16_to_float(b[i] = memo::float_to_bf16(x[i]));
      return b;
    };
    std::vector<bf16> q = rounded(buf.q), k = rounded(buf.k), v = rounded(buf.v),
                      dout = rounded(buf.dout), o(q.size()), dq(q.size()), dk(k.size()),
                      dv(k.size());
    std::vector<float> scratch(size_t(
        std::max(memo::cpu::attention_bf16_forward_scratch_numel(buf.D, buf.H, buf.Hkv),
                 memo::cpu::attention_bf16_backward_scratch_numel(S, buf.D, buf.H, buf.Hkv))));
    const Tensor s(scratch.data(), {int64_t(scratch.size())}),
        lse(buf.lse.data(), {buf.B, buf.H, S});
    auto time = [&](auto&& step) {
      double sec = 0.0;
      for (int64_t r = 0; r < opt.reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        step();
        sec += seconds_since(t0) / opt.reps;
      }
      return sec;
    };
    const double f32_s = time([&] {
      buf.forward();
      buf.backward();
    });
    const double bf16_s = time([&] {
      memo::cpu::attention_bf16_forward(
          memo::View<bf16>(o.data(), {T, qc}), lse, memo::View<const bf16>(q.data(), {T, qc}),
          memo::View<const bf16>(k.data(), {T, kc}), memo::View<const bf16>(v.data(), {T, kc}),
          buf.B, buf.H, buf.Hkv, s, buf.mask());
      memo::cpu::attention_bf16_backward(
          memo::View<bf16>(dq.data(), {T, qc}), memo::View<bf16>(dk.data(), {T, kc}),
          memo::View<bf16>(dv.data(), {T, kc}), memo::View<const bf16>(dout.data(), {T, qc}),
          memo::View<const bf16>(q.data(), {T, qc}), memo::View<const bf16>(k.data(), {T, kc}),
          memo::View<const bf16>(v.data(), {T, kc}), memo::View<const bf16>(o.data(), {T, qc}), lse,
          buf.B, buf.H, buf.Hkv, s, buf.mask());
    });
    std::printf("%7lld %10.1f %10.1f %8.2f\n", (long long)S, 1e3 * f32_s, 1e3 * bf16_s,
                f32_s / bf16_s);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions opt = parse(argc, argv);
  std::printf("attention_bench: B=%lld H=%lld Hkv=%lld D=%lld threads=%d reps=%lld tile=%lld\n",
              (long long)opt.batch, (long long)opt.heads, (long long)opt.kv_heads,
              (long long)opt.head_dim, omp_get_max_threads(), (long long)opt.reps,
              (long long)memo::cpu::kAttnTile);
  const int64_t rss0 = proc_status_bytes("VmRSS:");
  std::printf("%7s %10s %10s %9s %9s %8s %8s %10s %11s %9s %11s %9s\n", "S", "fwd_ms", "bwd_ms",
              "fwd_ns/S2", "bwd_ns/S2", "fwd_GF/s", "bwd_GF/s", "scratch_KB", "total_MiB",
              "total_B/S", "hwm_grow_MiB", "hwm_B/S");
  for (int64_t S : opt.seqs) {
    double fwd_s = 0.0, bwd_s = 0.0;
    int64_t total_bytes, scratch_bytes;
    {
      AttnBuffers buf(opt.batch, S, opt.heads, opt.kv_heads, opt.head_dim);
      total_bytes = buf.bytes();
      scratch_bytes = buf.scratch_bytes();
      for (int64_t r = 0; r < opt.reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        buf.forward();
        fwd_s += seconds_since(t0) / opt.reps;
        t0 = std::chrono::steady_clock::now();
        buf.backward();
        bwd_s += seconds_since(t0) / opt.reps;
      }
    }
    // Causal tile products: forward 2 (q k^T, p v), backward 5; each 2 * S^2 / 2 * D flops per
    // (batch, head).
    const double unit_flops = double(S) * S * opt.head_dim * opt.heads * opt.batch;
    const int64_t hwm_grow = proc_status_bytes("VmHWM:") - rss0;
    const double s2 = double(S) * S * opt.batch * opt.heads;
    std::printf("%7lld %10.1f %10.1f %9.3f %9.3f %8.1f %8.1f %10.1f %11.2f %9.0f %11.2f %9.0f\n",
                (long long)S, 1e3 * fwd_s, 1e3 * bwd_s, 1e9 * fwd_s / s2, 1e9 * bwd_s / s2,
                2 * unit_flops / fwd_s * 1e-9, 5 * unit_flops / bwd_s * 1e-9,
                scratch_bytes / 1024.0, total_bytes / 1048576.0, double(total_bytes) / S,
                hwm_grow / 1048576.0, double(hwm_grow) / S);
    std::fflush(stdout);
  }
  if (!opt.documents.empty()) {
    std::printf(
        "document masks against causal at equal S (fwd+bwd; ideal ratio 1/docs plus the\n"
        "diagonal tiles' share):\n%7s %6s %10s %10s %8s\n",
        "S", "docs", "causal_ms", "masked_ms", "ratio");
    for (int64_t S : opt.seqs) {
      AttnBuffers buf(opt.batch, S, opt.heads, opt.kv_heads, opt.head_dim);
      auto time = [&] {
        double s = 0.0;
        for (int64_t r = 0; r < opt.reps; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          buf.forward();
          buf.backward();
          s += seconds_since(t0) / opt.reps;
        }
        return s;
      };
      const double causal_s = time();
      for (int64_t docs : opt.documents) {
        buf.set_documents(docs);
        const double masked_s = time();
        std::printf("%7lld %6lld %10.1f %10.1f %8.3f\n", (long long)S, (long long)docs,
                    1e3 * causal_s, 1e3 * masked_s, masked_s / causal_s);
        std::fflush(stdout);
      }
    }
  }
  if (opt.bf16) compare_bf16(opt);
  compare_to_reference(opt);  // last: its float64 buffers must not set the high-water mark
  return 0;
}
