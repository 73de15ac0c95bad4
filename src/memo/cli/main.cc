// The `memo` command: parses, validates and reports; the work is in the library.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/io/config_json.h"
#include "memo/kernels/cpu/kernels.h"
#include "memo/kernels/cpu/matmul_peak.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/adamw.h"
#include "memo/train/trainer.h"

namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

// memo bench: a timed training step (forward, backward, AdamW) on random tokens.
nlohmann::json run_bench(const std::string& config_path, int64_t seq, int64_t batch, int64_t steps) {
  using namespace memo;
  const ModelConfig config = load_model_config(config_path);
  Model model(config);
  model.init(1);
  AdamW opt(model.layout(), AdamWOptions{}, decay_matrices_only(model.layout()));
  CachingAllocator alloc;
  KeepStrategy strategy(config, alloc);
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(mix(7, i) % uint64_t(config.vocab_size));
    targets[i] = int32_t(mix(8, i) % uint64_t(config.vocab_size));
  }
  auto one_step = [&] {
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), batch, seq, 1.0f / float(batch * seq),
                           strategy, alloc);
    opt.step(model.params(), model.grads(), 1e-4);
  };
  one_step();  // warm-up: first-touch allocations
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) one_step();
  const double step_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  const double peak = cpu::measure_matmul_peak_flops(1.0);
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
          {"blas", cpu::blas_name()}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memo: train LLaMA-style language models on long sequences within a memory budget"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Every subcommand's flags");
  // A flag given twice takes its last value, as shell wrappers that append flags expect.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  memo::TrainOptions t;
  CLI::App* train = app.add_subcommand("train", "Train a model");
  train->add_option("--config", t.config_path, "Model config.json (Hugging Face LlamaConfig fields)");
  train->add_option("--data", t.data_path, "Training data: raw text (bytes) or an llm.c token file")->required();
  train->add_option("--val-data", t.val_data_path, "Validation data (default: the last --val-fraction of --data)");
  train->add_option("--val-fraction", t.val_fraction, "Fraction of --data held out for validation")->capture_default_str();
  train->add_option("--val-batches", t.val_batches, "Micro-batches of validation windows at the end")->capture_default_str();
  train->add_option("--seq", t.seq, "Tokens per sequence")->capture_default_str();
  train->add_option("--batch", t.batch, "Sequences per optimiser step")->capture_default_str();
  train->add_option("--micro-batch", t.micro_batch, "Sequences per forward/backward (0: --batch)")->capture_default_str();
  train->add_option("--steps", t.steps, "Optimiser steps in total")->capture_default_str();
  train->add_option("--lr", t.lr, "Peak learning rate")->capture_default_str();
  train->add_option("--min-lr-ratio", t.min_lr_ratio, "Cosine decay ends at lr * this")->capture_default_str();
  train->add_option("--warmup", t.warmup, "Linear warm-up steps")->capture_default_str();
  train->add_option("--weight-decay", t.adamw.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  train->add_option("--beta1", t.adamw.beta1, "AdamW beta1")->capture_default_str();
  train->add_option("--beta2", t.adamw.beta2, "AdamW beta2")->capture_default_str();
  train->add_option("--eps", t.adamw.eps, "AdamW epsilon")->capture_default_str();
  train->add_option("--clip", t.clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  train->add_option("--seed", t.seed, "Seed of the weight init and the data windows")->capture_default_str();
  CLI::Option* out_opt = train->add_option("--out", t.out_dir, "Run directory for checkpoints")->capture_default_str();
  train->add_option("--save-every", t.save_every, "Checkpoint period in steps (0: only at the end)")->capture_default_str();
  train->add_option("--resume", t.resume_dir, "Continue the run in this directory (or checkpoint)");
  train->add_option("--init-from", t.init_from, "Start from this checkpoint's weights with a fresh optimiser");
  train->add_option("--log", t.log_path, "JSON-lines log, one object per step");
  train->add_option("--log-every", t.log_every, "Progress line period in steps")->capture_default_str();

  std::string eval_ckpt, eval_data;
  int64_t eval_seq = 256, eval_batch = 8, eval_batches = 16;
  CLI::App* eval = app.add_subcommand("eval", "Mean loss of a checkpoint on windows read in order");
  eval->add_option("--checkpoint", eval_ckpt, "Checkpoint (or run) directory")->required();
  eval->add_option("--data", eval_data, "Data: raw text (bytes) or an llm.c token file")->required();
  eval->add_option("--seq", eval_seq, "Tokens per window")->capture_default_str();
  eval->add_option("--batch", eval_batch, "Windows per forward")->capture_default_str();
  eval->add_option("--batches", eval_batches, "Forwards (micro-batches) to average over")->capture_default_str();

  std::string bench_config;
  int64_t bench_seq = 1024, bench_batch = 1, bench_steps = 3;
  CLI::App* bench = app.add_subcommand("bench", "Time a training step: step time, tokens/s, MFU");
  bench->add_option("--config", bench_config, "Model config.json")->required();
  bench->add_option("--seq", bench_seq, "Tokens per sequence")->capture_default_str();
  bench->add_option("--batch", bench_batch, "Sequences per step")->capture_default_str();
  bench->add_option("--steps", bench_steps, "Timed steps after one warm-up step")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "memo: error: %s (see memo --help)\n", msg.c_str());
    return 2;
  }

  try {
    if (*train) {
      if (t.resume_dir.empty() && t.config_path.empty())
        throw memo::ConfigError("--config is required (or --resume a run)");
      if (!t.resume_dir.empty() && out_opt->count() == 0) {
        // continue writing into the run being resumed
        std::filesystem::path r(t.resume_dir);
        t.out_dir = std::filesystem::exists(r / "model.safetensors") ? r.parent_path().string() : r.string();
      }
      memo::train(t, std::cout);
    } else if (*eval) {
      const memo::EvalResult r = memo::evaluate_checkpoint(eval_ckpt, eval_data, eval_seq, eval_batch, eval_batches);
      std::cout << nlohmann::json{{"loss", r.mean_loss}, {"tokens", r.tokens}, {"windows", r.windows},
                                  {"seq", eval_seq}}.dump() << "\n";
    } else if (*bench) {
      std::cout << run_bench(bench_config, bench_seq, bench_batch, bench_steps).dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memo: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
