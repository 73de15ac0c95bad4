// The cost of the online gradient noise scale (train/grad_noise.h) per training step: the same
// micro-batched step (forward/backward of each micro-batch, global norm, AdamW) with and without
// the probe, interleaved A B A B so that load drift on a shared machine hits both alike; medians
// of step times, their ratio, and the probe's own calls timed alone (the cost it adds by design:
// one fused pass over the gradient per micro-batch: squared norm, add into a side buffer, zero).
//   gns_bench CONFIG [seq] [batch] [micro_batch] [steps]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/tensor_ops.h"
#include "memo/io/config_json.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/adamw.h"
#include "memo/train/grad_noise.h"

using namespace memo;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gns_bench CONFIG [seq] [batch] [micro_batch] [steps]\n");
    return 2;
  }
  const ModelConfig config = load_model_config(argv[1]);
  const int64_t seq = argc > 2 ? std::atoll(argv[2]) : 64,
                batch = argc > 3 ? std::atoll(argv[3]) : 16;
  const int64_t micro = argc > 4 ? std::atoll(argv[4]) : 4,
                steps = argc > 5 ? std::atoll(argv[5]) : 20;
  const int64_t k = batch / micro;
  Model model(config, cpu_backend());
  model.init(1);
  AdamW opt(model.layout(), AdamWOptions{}, decay_matrices_only(model.layout()), cpu_backend());
  CachingAllocator alloc;
  KeepStrategy strategy(skeletal_layout(config, DType::kF32), alloc);
  GradNoiseProbe probe(model.params_numel(), k, micro * seq, {}, cpu_backend());
  std::vector<int32_t> tokens(size_t(batch * seq + 1));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t(mix(9, i) % uint64_t(config.vocab_size));
  const float scale = 1.0f / float(batch * seq);
  const int64_t n = model.params_numel();
  double probe_s = 0.0;
  auto step = [&](bool with_probe) {
    model.zero_grads();
    for (int64_t m = 0; m < k; ++m) {
      const int32_t* in = tokens.data() + m * micro * seq;
      model.forward_backward(in, in + 1, micro, seq, scale, strategy, alloc);
      const auto t = Clock::now();
      if (with_probe) probe.after_micro(model.grads_tensor(), m);
      probe_s += with_probe ? since(t) : 0.0;
    }
    const double sq = cpu::sum_squares(View<const float>(model.grads(), {n}));
    auto t = Clock::now();
    if (with_probe) probe.end_step(sq);
    probe_s += with_probe ? since(t) : 0.0;
    opt.step(model.params_tensor(), model.grads_tensor(), 1e-4);
  };
  step(false), step(true);  // warm-up: first-touch allocations
  probe_s = 0.0;
  std::vector<double> off, on;
  for (int64_t i = 0; i < steps; ++i) {
    for (bool p : {false, true}) {
      const auto t = Clock::now();
      step(p);
      (p ? on : off).push_back(since(t));
    }
  }
  const double m_off = median(off), m_on = median(on), probe_per_step = probe_s / double(steps);
  std::printf(
      "gns_bench: %lld params, seq %lld, batch %lld x %lld micro-batches of %lld, %lld steps each, "
      "%d threads\n",
      (long long)model.layout().count(), (long long)seq, (long long)batch, (long long)k,
      (long long)micro, (long long)steps, omp_get_max_threads());
  std::printf(
      "step median: no probe %.2f ms, probe %.2f ms, ratio %.4f; probe calls alone %.3f ms/step = "
      "%.2f%% of the step\n",
      1e3 * m_off, 1e3 * m_on, m_on / m_off, 1e3 * probe_per_step, 100.0 * probe_per_step / m_off);
  return 0;
}
