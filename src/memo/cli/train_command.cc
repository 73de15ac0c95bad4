// memo train: flags -> TrainOptions -> train().
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "memo/cli/batch_schedule_flags.h"
#include "memo/cli/commands.h"
#include "memo/cli/runtime.h"
#include "memo/cli/optimizer_flags.h"
#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/io/hardware_json.h"
#include "memo/train/trainer.h"

namespace memo::cli {

void add_train_command(CLI::App& app, MpiCommunicator* world) {
  auto t = std::make_shared<TrainOptions>();
  CLI::App* train = app.add_subcommand("train", "Train a model");
  train->add_option("--config", t->config_path,
                    "Model config.json (Hugging Face LlamaConfig fields)");
  train
      ->add_option("--data", t->data_path, "Training data: raw text (bytes) or an llm.c token file")
      ->required();
  train->add_option("--val-data", t->val_data_path,
                    "Validation data (default: the last --val-fraction of --data)");
  train->add_option("--val-fraction", t->val_fraction, "Fraction of --data held out for validation")
      ->capture_default_str();
  train
      ->add_option("--val-batches", t->val_batches,
                   "Micro-batches of validation windows at the end")
      ->capture_default_str();
  train->add_option("--seq", t->seq, "Tokens per sequence")->capture_default_str();
  train->add_option("--batch", t->batch, "Sequences per optimiser step")->capture_default_str();
  train->add_option("--micro-batch", t->micro_batch, "Sequences per forward/backward (0: --batch)")
      ->capture_default_str();
  train->add_option("--steps", t->steps, "Optimiser steps in total")->capture_default_str();
  CLI::Option* lr = train->add_option("--lr", t->lr, "Peak learning rate")->capture_default_str();
  train->add_option("--min-lr-ratio", t->min_lr_ratio, "Cosine decay ends at lr * this")
      ->capture_default_str();
  train->add_option("--warmup", t->warmup, "Linear warm-up steps")->capture_default_str();
  auto optim = std::make_shared<OptimizerFlags>();
  add_optimizer_flags(*train, *optim);
  train->add_flag("--gns,!--no-gns", t->gns,
                  "Log the gradient noise scale B_simple (tokens) when a step has >= 2 "
                  "micro-batches (on by default)");
  train->add_option("--gns-decay", t->gns_decay, "EMA decay per step of the noise-scale estimator")
      ->capture_default_str();
  train->add_option("--clip", t->clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  train->add_option("--seed", t->seed, "Seed of the weight init and the data windows")
      ->capture_default_str();
  CLI::Option* out = train->add_option("--out", t->out_dir, "Run directory for checkpoints")
                         ->capture_default_str();
  train
      ->add_option("--save-every", t->save_every, "Checkpoint period in steps (0: only at the end)")
      ->capture_default_str();
  train->add_option("--resume", t->resume_dir,
                    "Continue the run in this directory (or checkpoint)");
  train->add_option("--init-from", t->init_from,
                    "Start from this checkpoint's weights with a fresh optimiser");
  train->add_option("--log", t->log_path, "JSON-lines log, one object per step");
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*train, *device, true);
  auto gpu = std::make_shared<std::string>();
  train->add_option("--gpu", *gpu,
                    "--device cuda: the GPU's datasheet (a name in --hardware-dir, e.g. h200, or a "
                    ".json file) for MFU against its dense bf16 peak (default: the shipped file of "
                    "the GPU's model, where one matches)");
  auto hardware_dir = std::make_shared<std::string>(MEMO_HARDWARE_DIR);
  train->add_option("--hardware-dir", *hardware_dir, "Where the shipped GPU files are")
      ->capture_default_str();
  auto device_memory = std::make_shared<std::string>();
  train->add_option("--device-memory", *device_memory,
                    "Device memory budget, e.g. 1.5GiB: plan activations into one arena and refuse "
                    "a run that does not fit (default: on --device cuda the GPU's free memory at "
                    "start less 5%, at least 1 GiB; on the CPU no budget; 0: no budget)");
  train->add_option("--log-every", t->log_every, "Progress line period in steps")
      ->capture_default_str();
  train
      ->add_option("--zero", t->zero,
                   "Under mpirun: 1 shards the optimiser state and update over the processes "
                   "(ZeRO-1), 0 keeps all of it on each")
      ->capture_default_str();
  train
      ->add_option("--cp", t->cp,
                   "Under mpirun: split each sequence over this many processes (context "
                   "parallelism, ring attention); the rest of the processes are data parallel")
      ->capture_default_str();
  train
      ->add_option("--tp", t->tp,
                   "Under mpirun: split each layer's heads, MLP units and vocabulary over this "
                   "many processes, with the sequence split between the layers (Megatron-LM's "
                   "tensor + sequence parallelism; LLaMA and GPT-2)")
      ->capture_default_str();
  // activation strategy (memory/strategy_factory.h)
  auto host_memory = std::make_shared<std::string>();
  auto alpha = std::make_shared<double>(0.0);
  train
      ->add_option("--activations", t->activations.kind,
                   "Where skeletal activations live: keep, recompute, offload or memo")
      ->check(CLI::IsMember({"keep", "recompute", "offload", "memo"}))
      ->capture_default_str();
  CLI::Option* alpha_opt = train->add_option(
      "--alpha", *alpha,
      "memo: fraction of tokens offloaded, the rest recomputed (default: the cost model's choice)");
  train->add_option("--host-memory", *host_memory,
                    "offload, memo: host memory budget for offloaded activations, e.g. 1.5GiB "
                    "(default: unlimited)");
  train->add_option("--copy-bandwidth", t->activations.copy_bandwidth_gb_per_s,
                    "offload, memo: throttle each copy stream to this many GB/s (0: no throttle)");
  auto schedule = std::make_shared<BatchScheduleFlags>();
  add_batch_schedule_flags(*train, *schedule);
  train->callback([t, out, optim, device, gpu, hardware_dir, device_memory, host_memory,
                   alpha, alpha_opt, schedule, lr, world] {
    TrainOptions o = *t;
    o.optimizer = resolve_optimizer(*optim);
    o.batch_schedule = resolve_batch_schedule(*schedule, o.optimizer.name, !o.resume_dir.empty());
    if (o.batch_schedule && o.resume_dir.empty() && lr->count() > 0)
      throw ConfigError(
          "--lr is set by the law under --batch-schedule noise: give --eps-max and --b-noise, or "
          "--fit");
    if (alpha_opt->count() > 0) o.activations.alpha = *alpha;
    if (!host_memory->empty())
      o.activations.host_memory_bytes = parse_bytes(*host_memory, "--host-memory");
    if (!device_memory->empty())
      o.device_memory_bytes = parse_bytes(*device_memory, "--device-memory");
    if (o.resume_dir.empty() && o.config_path.empty())
      throw ConfigError("--config is required (or --resume a run)");
    if (!o.resume_dir.empty() && out->count() == 0) {
      // continue writing into the run being resumed
      const std::filesystem::path r(o.resume_dir);
      o.out_dir =
          std::filesystem::exists(r / "model.safetensors") ? r.parent_path().string() : r.string();
    }
    if (!gpu->empty() && device->device != "cuda")
      throw ConfigError("--gpu names the GPU of --device cuda");
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, world, std::cout);
    // The default budget: the GPU's free memory less a reserve for what runs outside the plan
    // (NCCL's buffers, the matrix-product peak measured at start, validation's caching allocator,
    // rope tables, the backend's scratch): 5%, at least 1 GiB.
    if (device_memory->empty())
      if (const int64_t free = runtime->backend().device_free_bytes(); free > 0)
        o.device_memory_bytes =
            std::max<int64_t>(free - std::max<int64_t>(int64_t(1) << 30, free / 20), 1);
    if (const std::string name = runtime->backend().device_name(); !name.empty()) {
      const std::optional<GpuSpec> spec =
          gpu->empty() ? match_gpu(name, *hardware_dir) : find_gpu(*gpu, *hardware_dir);
      if (spec) {
        o.device_peak_flops = spec->peak_bf16_flops;
        o.device_peak_name = spec->name;
      }
    }
    memo::train(o, *runtime);
  });
}

}  // namespace memo::cli
