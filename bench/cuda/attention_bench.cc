// Attention forward and backward on the CUDA backend at the shapes of the ~1B LLaMA of
// scripts/gpu-check.sh (32 query heads over 8 key/value heads of 64; and of 128, as Llama 3 8B's):
// in bf16 the fused kernels (Note [Flash attention], the default) against the chunked schedule
// (Note [Chunked attention], MEMO_CUDA_ATTENTION=chunked, at head dim 64) measured in the same run,
// and in fp32 the chunked schedule (up to 8K tokens). FLOPs
// counted causally: the forward's two products over the S (S + 1) / 2 visible query-key pairs,
// 4 D H each; the backward's five, 10 D H each. At head dim 64, both bf16 kernels also run with
// document masks (Note [Document masks]: equal documents of S/8 and S/64 rows, the last one
// taking the remainder), their time against the causal run's at the same window length (issue
// 25; their FLOPs still counted over the whole causal window, so a ratio is the gain).
//   memo_cuda_attention_bench [S ...]   (default: 4096 32768)
// One JSON object a line; scripts/gpu-check.sh runs it beside scripts/torch_gpu_attention.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "memo/backend/attn_mask.h"
#include "memo/backend/raw_allocator.h"
#include "memo/core/dtype.h"
#include "memo/core/error.h"
#include "memo/cuda/cuda_backend.h"

namespace {

using memo::Backend;
using memo::DType;
using memo::RawBuffer;
using memo::Tensor;

struct Timing {
  double fwd_ms = 0.0, bwd_ms = 0.0;
};

// The best of `reps` timed forward + backward passes after one untimed (algorithms, clocks).
// docs > 0: a document mask of `docs` equal documents.
Timing run(Backend& be, int64_t S, int64_t H, int64_t Hkv, int64_t D, int reps, DType act,
           int64_t docs = 0) {
  auto& dev = be.allocator(be.device_space());
  const int64_t B = 1, T = B * S;
  std::vector<int32_t> key_start;  // each row's document start (host memory, as AttnMask takes it)
  for (int64_t i = 0; docs > 0 && i < T; ++i)
    key_start.push_back(int32_t(std::min(i / (S / docs), docs - 1) * (S / docs)));
  const memo::AttnMask mask =
      docs > 0 ? memo::AttnMask::causal_from(memo::View<const int32_t>(key_start.data(), {T}))
               : memo::AttnMask::kCausal;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // activations of dtype `act` (q, k, v, o and their gradients); lse and scratch f32
  auto buffer = [&](memo::Shape shape, bool random, DType dt = DType::kF32) {
    const int64_t n = shape.numel();
    RawBuffer b(dev, std::max<int64_t>(n, 1) * 4, "bench");
    std::vector<float> h(size_t(n), 0.0f);
    if (random)
      for (float& x : h) x = u(rng);
    if (dt == DType::kBF16) {
      std::vector<memo::bf16> h16;
      for (float x : h) h16.push_back(memo::float_to_bf16(x));
      be.copy_from_host(b.data(), h16.data(), n * 2);
    } else {
      be.copy_from_host(b.data(), h.data(), n * 4);
    }
    return std::tuple{std::move(b), shape, dt};
  };
  auto q = buffer({T, H * D}, true, act), k = buffer({T, Hkv * D}, true, act),
       v = buffer({T, Hkv * D}, true, act), dout = buffer({T, H * D}, true, act),
       o = buffer({T, H * D}, false, act), lse = buffer({B, H, S}, false),
       dq = buffer({T, H * D}, false, act), dk = buffer({T, Hkv * D}, false, act),
       dv = buffer({T, Hkv * D}, false, act),
       fs = buffer({be.attention_forward_scratch_numel(S, D, H, Hkv)}, false),
       bs = buffer({be.attention_backward_scratch_numel(S, D, H, Hkv)}, false),
       ws = buffer({std::max<int64_t>(1, be.matmul_workspace_bytes() / 4)}, false);
  auto t = [](auto& b) { return std::get<0>(b).tensor(std::get<1>(b), std::get<2>(b)); };
  be.set_matmul_workspace(t(ws));
  float sink = 0.0f;
  auto sync = [&] { be.copy_to_host(&sink, std::get<0>(lse).data(), 4); };
  Timing best{1e30, 1e30};
  for (int r = 0; r <= reps; ++r) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    be.attention_forward(t(o), t(lse), t(q), t(k), t(v), B, H, Hkv, t(fs), mask);
    sync();
    const auto t1 = std::chrono::steady_clock::now();
    be.attention_backward(t(dq), t(dk), t(dv), t(dout), t(q), t(k), t(v), t(o), t(lse), B, H, Hkv,
                          t(bs), mask);
    sync();
    const auto t2 = std::chrono::steady_clock::now();
    if (r == 0) continue;  // warm-up
    best.fwd_ms = std::min(best.fwd_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best.bwd_ms = std::min(best.bwd_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  be.set_matmul_workspace(Tensor());
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int64_t> seqs;
  for (int i = 1; i < argc; ++i) seqs.push_back(std::atoll(argv[i]));
  if (seqs.empty()) seqs = {4096, 32768};
  const int64_t H = 32, Hkv = 8;
  std::unique_ptr<Backend> flash = memo::make_cuda_backend(0);  // the default
  setenv("MEMO_CUDA_ATTENTION", "chunked", 1);                  // read once, when a backend is made
  std::unique_ptr<Backend> chunked = memo::make_cuda_backend(0);
  unsetenv("MEMO_CUDA_ATTENTION");
  std::printf("{\"device\": \"%s\"}\n", chunked->describe().c_str());
  for (int64_t S : seqs)
    for (const int64_t D : {int64_t(64), int64_t(128)}) {
      const double pairs = double(S) * double(S + 1) / 2.0;
      const double fwd_flop = 4.0 * D * H * pairs, bwd_flop = 10.0 * D * H * pairs;
      auto report = [&](const char* impl, const Timing& t) {
        std::printf(
            "{\"impl\": \"%s\", \"seq\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
            "\"head_dim\": %lld, \"fwd_ms\": %.3f, \"bwd_ms\": %.3f, \"fwd_bwd_ms\": %.3f, "
            "\"fwd_tflops\": %.2f, \"fwd_bwd_tflops\": %.2f}\n",
            impl, static_cast<long long>(S), static_cast<long long>(H), static_cast<long long>(Hkv),
            static_cast<long long>(D), t.fwd_ms, t.bwd_ms, t.fwd_ms + t.bwd_ms,
            fwd_flop / (t.fwd_ms * 1e-3) / 1e12,
            (fwd_flop + bwd_flop) / ((t.fwd_ms + t.bwd_ms) * 1e-3) / 1e12);
        std::fflush(stdout);
      };
      const Timing f = run(*flash, S, H, Hkv, D, 3, DType::kBF16);
      report("flash_bf16", f);
      if (D != 64) continue;  // the chunked schedule at the ~1B model's head dim only
      const Timing cb = run(*chunked, S, H, Hkv, D, 3, DType::kBF16);
      report("chunked_bf16", cb);
      std::printf("{\"seq\": %lld, \"flash_speedup_over_chunked_bf16\": %.2f}\n",
                  static_cast<long long>(S), (cb.fwd_ms + cb.bwd_ms) / (f.fwd_ms + f.bwd_ms));
      for (const int64_t docs : {int64_t(8), int64_t(64)}) {
        const Timing fd = run(*flash, S, H, Hkv, D, 3, DType::kBF16, docs);
        const Timing cd = run(*chunked, S, H, Hkv, D, 3, DType::kBF16, docs);
        std::printf(
            "{\"seq\": %lld, \"documents\": %lld, \"flash_bf16_fwd_bwd_ms\": %.3f, "
            "\"flash_causal_over_docs\": %.2f, \"chunked_bf16_fwd_bwd_ms\": %.3f, "
            "\"chunked_causal_over_docs\": %.2f}\n",
            static_cast<long long>(S), static_cast<long long>(docs), fd.fwd_ms + fd.bwd_ms,
            (f.fwd_ms + f.bwd_ms) / (fd.fwd_ms + fd.bwd_ms), cd.fwd_ms + cd.bwd_ms,
            (cb.fwd_ms + cb.bwd_ms) / (cd.fwd_ms + cd.bwd_ms));
        std::fflush(stdout);
      }
      // f32: 2.8 s a pass at 32K on an H200 (bench/RESULTS.md): at the shorter lengths only
      if (S <= 8192) report("chunked", run(*chunked, S, H, Hkv, D, 3, DType::kF32));
    }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "memo_cuda_attention_bench: %s\n", e.what());
  return 1;
}
