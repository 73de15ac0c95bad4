// memo bench: a timed training step (forward, backward, AdamW) on random tokens: step time,
// tokens/s, MFU against the measured matrix-product peak, peak activation bytes and peak RSS.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/runtime.h"
#include "memo/core/random.h"
#include "memo/io/config_json.h"
#include "memo/memory/strategy.h"
#include "memo/model/flops.h"
#include "memo/model/model.h"
#include "memo/optim/adamw.h"
#include "memo/train/step.h"
#include "memo/train/step_schedule.h"

namespace memo::cli {
namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

// memo bench: a timed training step (forward, backward, AdamW) on random tokens.
nlohmann::json run_bench(Runtime& runtime, const std::string& config_path, int64_t seq,
                         int64_t batch, int64_t steps) {
  const ModelConfig config = load_model_config(config_path);
  check_micro_batch_tokens(batch, seq, "runs");
  if (seq > config.max_positions())
    throw ConfigError(
        str("--seq ", seq, " exceeds ", config.positions_limit(), " of the model config"));
  Backend& backend = runtime.backend();
  if (const std::string w = backend.warning(); !w.empty())
    std::cerr << "memo: warning: " << w << "\n";
  Model model(config, backend);
  model.init(1);
  AdamW opt(model.layout(), AdamWOptions{}, decay_matrices_only(model.layout()), backend);
  CachingAllocator alloc(0, backend.allocator(backend.device_space()));
  KeepStrategy strategy(model.skeletal(), alloc);
  // The same random tokens every step, drawn once: the timed loop copies them, as a sampler would.
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(mix(7, i) % uint64_t(config.vocab_size));
    targets[i] = int32_t(mix(8, i) % uint64_t(config.vocab_size));
  }
  const auto fixed_tokens = [&](int64_t, int64_t, int32_t* in, int32_t* tgt, int64_t rows) {
    std::copy_n(inputs.data(), rows * seq, in);
    std::copy_n(targets.data(), rows * seq, tgt);
  };
  // The trainer's step (train/step.h): one micro-batch of the whole batch, no clipping.
  TrainStep train_step(model, opt, strategy, alloc, StepShape{batch, seq, 1}, fixed_tokens, nullptr,
                       runtime.world());
  auto one_step = [&] { train_step.update(train_step.gradients(1), 1e-4, 0.0); };
  one_step();  // warm-up: first-touch allocations
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) one_step();
  const double step_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  const double peak = backend.measure_matmul_peak_flops(1.0);
  const double flops = train_flops_per_token(config, seq) * double(batch * seq);
  return {{"params", model.layout().count()},
          {"seq", seq},
          {"batch", batch},
          {"step_seconds", step_s},
          {"tokens_per_s", double(batch * seq) / step_s},
          {"model_flops_per_step", flops},
          {"matmul_peak_flops", peak},
          {"mfu", flops / step_s / peak},
          {"activation_peak_bytes", alloc.peak_live_bytes()},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"backend", backend.describe()},
          {"precision", precision_name(runtime.precision())}};
}

}  // namespace

void add_bench_command(CLI::App& app) {
  struct Options {
    std::string config;
    int64_t seq = 1024, batch = 1, steps = 3;
  };
  auto o = std::make_shared<Options>();
  CLI::App* bench = app.add_subcommand("bench", "Time a training step: step time, tokens/s, MFU");
  bench->add_option("--config", o->config, "Model config.json")->required();
  bench->add_option("--seq", o->seq, "Tokens per sequence")
      ->capture_default_str()
      ->check(number_check(true));
  bench->add_option("--batch", o->batch, "Sequences per step")
      ->capture_default_str()
      ->check(number_check(true));
  bench->add_option("--steps", o->steps, "Timed steps after one warm-up step")
      ->capture_default_str()
      ->check(number_check(true));
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*bench, *device);
  bench->callback([o, device] {
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, nullptr, std::cout);
    std::cout << run_bench(*runtime, o->config, o->seq, o->batch, o->steps).dump() << "\n";
  });
}

}  // namespace memo::cli
