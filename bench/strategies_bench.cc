// Activation-strategy benchmark on the small config (configs/small.json), one sequence per
// micro-batch. (1) For a fixed device budget, per strategy: the device peak measured at two
// lengths, the linear fit peak(S) = a + b S (every activation is [T, ...]), the longest sequence (a
// multiple of 64) whose fitted peak fits, the measured peak and tokens/s there. (2) At the longest
// length keep fits: each strategy's tokens/s and its ratio to keep. (3) With the copy streams
// throttled: memo's cost-model alpha (profiled in a warm-up) against fixed alphas. tokens/s: 1
// timed micro-batch after 1 untimed in (1), 2 in (2) and (3); timings on a shared machine are
// noisy.
//   usage: strategies_bench [budget_MiB=128] [copy_GB_per_s=0.5] [config=configs/small.json]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/kernels.h"
#include "memo/io/config_json.h"
#include "memo/memory/memo.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/model.h"

namespace {

using namespace memo;
constexpr double kMiB = 1024.0 * 1024.0;

struct Measure {
  int64_t device_peak_bytes = 0;
  int64_t host_peak_bytes = 0;
  double tokens_per_s = 0.0;
  std::string summary;
};

std::vector<int32_t> tokens(int64_t n, int32_t V) {
  std::vector<int32_t> t(size_t(n + 1));
  uint64_t s = 88172645463325252ull;
  for (int32_t& v : t) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = int32_t(s % uint64_t(V));
  }
  return t;
}

// Runs `untimed` then `timed` micro-batches of one sequence of `seq` tokens.
Measure measure(Model& model, const StrategyOptions& o, int64_t seq, int untimed, int timed) {
  CachingAllocator alloc;
  auto strategy = make_strategy(model.skeletal(), alloc, o);
  const std::vector<int32_t> t = tokens(seq, int32_t(model.config().vocab_size));
  for (int i = 0; i < untimed; ++i)
    model.forward_backward(t.data(), t.data() + 1, 1, seq, 0.0f, *strategy, alloc);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < timed; ++i)
    model.forward_backward(t.data(), t.data() + 1, 1, seq, 0.0f, *strategy, alloc);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Measure m;
  m.device_peak_bytes = alloc.peak_live_bytes();
  m.host_peak_bytes = strategy->host_peak_bytes();
  m.tokens_per_s = timed > 0 ? double(timed * seq) / s : 0.0;
  m.summary = strategy->summary();
  return m;
}

StrategyOptions options(const std::string& kind) {
  StrategyOptions o;
  o.kind = kind;
  if (kind == "memo") o.alpha = 0.5;  // device bytes do not depend on alpha
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const double budget_mib = argc > 1 ? std::atof(argv[1]) : 128.0;
  const double copy_gb_s = argc > 2 ? std::atof(argv[2]) : 0.5;
  ModelConfig cfg = load_model_config(argc > 3 ? argv[3] : "configs/small.json");
  cfg.max_position_embeddings = 1 << 20;  // the bench goes past the config's trained length
  Model model(cfg, cpu_backend());
  model.init(1);
  const int64_t budget = int64_t(budget_mib * kMiB);
  std::printf(
      "strategies_bench: C %lld, F %lld, L %lld, H %lld, Hkv %lld, V %lld; 1 sequence per "
      "micro-batch; %d threads; %s\n",
      (long long)cfg.hidden_size, (long long)cfg.intermediate_size,
      (long long)cfg.num_hidden_layers, (long long)cfg.num_attention_heads,
      (long long)cfg.num_key_value_heads, (long long)cfg.vocab_size, omp_get_max_threads(),
      cpu::blas_name());
  std::printf("\n## 1. Longest sequence within a %.0f MiB device budget\n\n", budget_mib);
  std::printf(
      "| strategy | peak @256 MiB | peak @512 MiB | fit MiB/1K tokens | longest S | peak there MiB "
      "| host MiB | tokens/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const char* kinds[] = {"keep", "recompute", "offload", "memo"};
  int64_t keep_longest = 0;
  for (const char* kind : kinds) {
    const StrategyOptions o = options(kind);
    const Measure a = measure(model, o, 256, 1, 0), b = measure(model, o, 512, 1, 0);
    const double slope = double(b.device_peak_bytes - a.device_peak_bytes) / 256.0;
    const double base = double(a.device_peak_bytes) - slope * 256.0;
    const int64_t longest = int64_t((double(budget) - base) / slope) / 64 * 64;
    if (std::string(kind) == "keep") keep_longest = longest;
    const Measure m = measure(model, o, longest, 1, 1);
    std::printf("| %s | %.1f | %.1f | %.2f | %lld | %.1f | %.1f | %.0f |\n", kind,
                a.device_peak_bytes / kMiB, b.device_peak_bytes / kMiB, slope * 1024.0 / kMiB,
                (long long)longest, m.device_peak_bytes / kMiB, m.host_peak_bytes / kMiB,
                m.tokens_per_s);
  }
  std::printf("\n## 2. At keep's longest sequence (S = %lld), unthrottled copies\n\n",
              (long long)keep_longest);
  std::printf("| strategy | tokens/s | vs keep |\n|---|---|---|\n");
  double keep_tps = 0.0;
  for (const char* kind : kinds) {
    StrategyOptions o = options(kind);
    if (std::string(kind) == "memo") o.alpha.reset();  // the cost model's alpha
    const Measure m = measure(model, o, keep_longest, 1, 2);
    if (std::string(kind) == "keep") keep_tps = m.tokens_per_s;
    std::printf("| %s | %.0f | %.2fx |\n", kind, m.tokens_per_s, m.tokens_per_s / keep_tps);
    if (std::string(kind) == "memo") std::printf("\n%s\n", m.summary.c_str());
  }
  std::printf("\n## 3. memo at S = %lld with copies throttled to %.2f GB/s\n\n",
              (long long)keep_longest, copy_gb_s);
  StrategyOptions o = options("memo");
  o.alpha.reset();
  o.copy_bandwidth_gb_per_s = copy_gb_s;
  const Measure picked = measure(model, o, keep_longest, 1, 2);
  std::printf("cost model: %s\n\n| alpha | tokens/s | vs cost model |\n|---|---|---|\n",
              picked.summary.c_str());
  for (double alpha : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    o.alpha = alpha;
    const Measure m = measure(model, o, keep_longest, 1, 2);
    std::printf("| %.2f | %.0f | %.2fx |\n", alpha, m.tokens_per_s,
                m.tokens_per_s / picked.tokens_per_s);
  }
  std::printf("| cost model | %.0f | 1.00x |\n", picked.tokens_per_s);
  return 0;
}
