// memo train: flags -> TrainOptions and the runtime (cli/runtime.h) -> train(). The flags come in
// groups (data, step, gradient, run directory, positions, device, layout, activations), each a
// function.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "memo/cli/batch_schedule_flags.h"
#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/optimizer_flags.h"
#include "memo/cli/position_flags.h"
#include "memo/cli/run_file.h"
#include "memo/cli/runtime.h"
#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/core/units.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/io/hardware_json.h"
#include "memo/io/json_file.h"
#include "memo/train/optimizer_setup.h"
#include "memo/train/stop_signals.h"
#include "memo/train/trainer.h"

namespace memo::cli {

namespace {

const CLI::Validator kNonNegative = number_check(false), kPositive = number_check(true);

// Flags whose values need parsing or checking before they become TrainOptions fields.
struct TrainFlags {
  TrainOptions options;
  OptimizerFlags optimizer;
  BatchScheduleFlags schedule;
  RuntimeFlags device;
  std::string gpu, hardware_dir = MEMO_HARDWARE_DIR, device_memory, host_memory;
  std::string save_dtype, max_shard_size;
  std::string exit_signal = "TERM,INT,USR1", time_limit;
  PositionFlags positions;
  double alpha = 0.0;
  CLI::Option* alpha_opt = nullptr;
  CLI::Option* lr = nullptr;
  CLI::Option* warmup = nullptr;
  CLI::Option* min_lr = nullptr;
  CLI::Option* out = nullptr;
  CLI::Option* data = nullptr;
  CLI::Option* steps = nullptr;
  bool print_run = false;  // --print-run
  std::string run_path;    // --run (already read: main() put its keys among the flags)
};

void add_data_flags(CLI::App& cmd, TrainFlags& f) {
  TrainOptions* t = &f.options;
  cmd.add_option("--config", t->config_path,
                 "Model config.json in Hugging Face's fields (LlamaForCausalLM, "
                 "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, GPT2LMHeadModel)");
  f.data = cmd.add_option(
      "--data", t->data_path,
      "Training data: raw text (bytes), an llm.c token file, a memo tokenize folder or a glob "
      "of token files (required; with --resume: the run's own unless given)");
  cmd.add_option("--val-data", t->val_data_path,
                 "Validation data (default: a tokenize folder's validation shards, else the last "
                 "--val-fraction of --data)");
  cmd.add_option("--val-fraction", t->val_fraction,
                 "Fraction of --data held out for validation when it has no validation shards")
      ->capture_default_str();
  cmd.add_option("--val-batches", t->val_batches, "Micro-batches of validation windows at the end")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--eval-every", t->eval_every,
                 "Validate every N steps too, on the same windows each time (0: at the end)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--eval-tokens", t->eval_tokens,
                 "Validate on the windows that hold this many tokens from the start of the "
                 "validation data, instead of --val-batches micro-batches (at most all of it)")
      ->check(kPositive)
      ->excludes(cmd.get_option("--val-batches"));
}

// The step: its shape, its length and the learning-rate schedule.
void add_step_flags(CLI::App& cmd, TrainFlags& f) {
  TrainOptions* t = &f.options;
  auto* seq = cmd.add_option("--seq", t->seq, "Tokens per sequence")->capture_default_str();
  cmd.add_option("--batch", t->batch, "Sequences per optimiser step")->capture_default_str();
  cmd.add_option("--micro-batch", t->micro_batch, "Sequences per forward/backward (0: --batch)")
      ->capture_default_str();
  auto* steps = f.steps =
      cmd.add_option("--steps", t->steps,
                     "Optimiser steps in total (with --resume: the run's own unless given)")
          ->capture_default_str();
  f.lr = cmd.add_option("--lr", t->lr, "Peak learning rate")->capture_default_str();
  f.min_lr = cmd.add_option("--min-lr-ratio", t->min_lr_ratio, "Cosine decay ends at lr * this")
                 ->capture_default_str();
  f.warmup = cmd.add_option("--warmup", t->warmup, "Linear warm-up steps")->capture_default_str();
  CLI::Option* schedule =
      cmd.add_option("--seq-schedule", t->seq_schedule,
                     "Length stages SEQ:STEPS,... (STEPS, or tokens with a t suffix; 1K = 1024), "
                     "e.g. 4K:2000,16K:500: each keeps the first stage's tokens per step and per "
                     "micro-batch (--batch and --micro-batch count the first stage's sequences)")
          ->check(CLI::Validator(
              [](std::string& s) {
                return s.empty() ? std::string("is empty; e.g. 4K:2000,16K:500") : std::string();
              },
              "SEQ:STEPS,..."))
          ->excludes(seq)
          ->excludes(steps);
  cmd.add_option("--stage-batch", t->stage_batch,
                 "What each --seq-schedule stage keeps of the first's: tokens (per step and per "
                 "micro-batch) or sequences (--batch and --micro-batch as given)")
      ->check(CLI::IsMember({"tokens", "sequences"}))
      ->capture_default_str()
      ->needs(schedule);
  cmd.add_option("--stage-rope", t->stage_rope,
                 "From stage K of --seq-schedule on, these config.json position fields, as "
                 "K:JSON, e.g. '2:{\"rope_theta\": 500000}' (rope_theta, rope_scaling, "
                 "max_position_embeddings; repeat the flag for more stages)")
      ->allow_extra_args(false);
}

void add_gradient_flags(CLI::App& cmd, TrainOptions* t) {
  cmd.add_flag("--gns,!--no-gns", t->gns,
               "Log the gradient noise scale B_simple (tokens) when a step has >= 2 "
               "micro-batches (on by default; its sum of the micro-batches rounds differently, "
               "so --no-gns changes the last bits)");
  cmd.add_option("--gns-decay", t->gns_decay, "EMA decay per step of the noise-scale estimator")
      ->capture_default_str();
  cmd.add_option("--clip", t->clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  cmd.add_flag("--document-mask", t->document_mask,
               "Attention within each document of a packed window, positions from 0 at each "
               "(documents start at each --eot-id token)");
  cmd.add_option("--eot-id", t->eot_id,
                 "The token that starts each document and ends the one before (default: the "
                 "memo tokenize folder's document start and end of text: BOS and end of text "
                 "for a tokenizer with a BOS, else its end of text for both)")
      ->check(kNonNegative);
  cmd.add_flag("--eod-mask-loss", t->eod_mask_loss,
               "The loss leaves out the predictions made from each end-of-text (or --eot-id) "
               "token: of a document's first text token from nothing, or, where documents start "
               "with a BOS, of the next document's BOS");
  cmd.add_option("--seed", t->seed, "Seed of the weight init and the data windows")
      ->capture_default_str()
      ->check(number_check(false));
}

// Where the run writes (checkpoints, log, progress) and what it starts from.
void add_run_dir_flags(CLI::App& cmd, TrainFlags& f) {
  TrainOptions* t = &f.options;
  f.out =
      cmd.add_option("--out", t->out_dir, "Run directory for checkpoints")->capture_default_str();
  auto* every = cmd.add_option("--save-every", t->save_every,
                               "Checkpoint period in steps (0: only at the end)")
                    ->capture_default_str()
                    ->check(kNonNegative);
  CLI::Option* none =
      cmd.add_flag("--no-checkpoint{false}", t->checkpoints,
                   "Write no checkpoint, not even at the end (benchmarks, dry runs)")
          ->excludes(every);
  cmd.add_option("--keep-last", t->keep_last,
                 "Checkpoints kept in --out, the newest (latest) included; older ones are removed "
                 "as each is written (0: keep every one)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_flag("--save-best", t->save_best,
               "Also checkpoint each step whose validation loss is the lowest so far (see "
               "--eval-every), name it in <out>/best, and keep it whatever --keep-last says")
      ->excludes(none);
  cmd.add_flag("--async-save", t->async_save,
               "Write checkpoints in the background: the step boundary only copies the state "
               "to host memory (one more copy of it held there); the next save waits")
      ->excludes(none);
  cmd.add_flag("--overwrite", t->overwrite,
               "Let a new run write into an --out that holds another run's checkpoints, "
               "removing them (and its latest and best) once this run's weights are loaded");
  cmd.add_option("--resume", t->resume_dir, "Continue the run in this directory (or checkpoint)");
  cmd.add_option("--init-from", t->init_from,
                 "Start from this checkpoint's weights with a fresh optimiser");
  cmd.add_option("--save-dtype", f.save_dtype,
                 "The checkpoints' model.safetensors in bf16 (rounded to nearest even; the fp32 "
                 "master weights go beside it in model.fp32.safetensors, which --resume reads) or "
                 "f32 (default: bf16 when the weights came from a bf16 checkpoint, else f32)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd.add_option("--max-shard-size", f.max_shard_size,
                 "Split the model tensors into model-0000i-of-0000N.safetensors files of at most "
                 "this size plus model.safetensors.index.json, as transformers does (e.g. 2GB, "
                 "500MB: GB and MB are decimal; a tensor larger than it gets a file of its own; "
                 "default: 5GB, or the resumed run's)");
  cmd.add_option("--exit-signal", f.exit_signal,
                 "Signals that stop the run after the step in flight, with a checkpoint, exit "
                 "status 0 (every rank after the same step; a second signal ends it at once): "
                 "TERM, INT, USR1, USR2, HUP, comma-separated, or none")
      ->capture_default_str();
  cmd.add_option("--time-limit", f.time_limit,
                 "Stop the same way once the run's wall time plus 1.5 times its longest step "
                 "would pass this (e.g. 3h50m, 90m, 45s): a job's limit, less the time to exit");
  cmd.add_option("--skip-nonfinite", t->skip_nonfinite,
                 "Skip a step whose loss or gradient norm is not finite (no update; logged as "
                 "skipped), at most this many in a row before stopping (0: the first stops)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--spike-skip", t->spike_skip,
                 "Skip a step whose gradient norm is above this many times the median of the "
                 "last 32 applied steps' (from the 8th on; no update, logged as skipped; more "
                 "than 8 in a row stop the run; 0: off)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd.add_option("--log", t->log_path, "JSON-lines log, one object per step");
  cmd.add_option("--tensorboard", t->tensorboard_dir,
                 "Also write each step's scalars (loss, lr, grad norm, tokens/s, MFU, memory "
                 "peaks, B_simple, batch, validation loss) as TensorBoard event files into this "
                 "directory (made if missing; a resumed run adds a file beside the earlier ones)")
      ->check([](const std::string& dir) {
        return dir.empty() ? std::string("an empty path; give the directory for the event files")
                           : std::string();
      });
  cmd.add_option("--log-every", t->log_every, "Progress line period in steps")
      ->capture_default_str()
      ->check(kPositive);
}

// Context extension: the loaded model's positions changed for this run (saved in its config.json).
// The device beyond --device and --precision: its datasheet and its memory budget.
void add_gpu_flags(CLI::App& cmd, TrainFlags& f) {
  cmd.add_option("--gpu", f.gpu,
                 "--device cuda: the GPU's datasheet (a name in --hardware-dir, e.g. h200, or a "
                 ".json file) for MFU against its dense bf16 peak (default: the shipped file of "
                 "the GPU's model, where one matches)");
  cmd.add_option("--hardware-dir", f.hardware_dir, "Where the shipped GPU files are")
      ->capture_default_str();
  cmd.add_option("--device-memory", f.device_memory,
                 "Device memory budget, e.g. 1.5GiB: plan activations into one arena and refuse "
                 "a run that does not fit (default: on --device cuda the GPU's free memory at "
                 "start less 5%, at least 1 GiB; on the CPU no budget; 0: no budget)");
}

void add_layout_flags(CLI::App& cmd, TrainOptions* t) {
  cmd.add_option("--zero", t->zero,
                 "Under mpirun: 1 shards the optimiser state and update over the processes "
                 "(ZeRO-1), 0 keeps all of it on each")
      ->capture_default_str();
  cmd.add_option("--cp", t->cp,
                 "Under mpirun: split each sequence over this many processes (context "
                 "parallelism, ring attention); the rest of the processes are data parallel")
      ->capture_default_str();
  cmd.add_option("--tp", t->tp,
                 "Under mpirun: split each layer's heads, MLP units and vocabulary over this "
                 "many processes, with the sequence split between the layers (Megatron-LM's "
                 "tensor + sequence parallelism)")
      ->capture_default_str();
  cmd.add_option("--pp", t->pp,
                 "Under mpirun: split the layers into this many pipeline stages, one process "
                 "each (1F1B; the outermost split of the processes)")
      ->capture_default_str();
  cmd.add_option("--virtual-stages", t->virtual_stages,
                 "With --pp: chunks of layers per process (interleaved 1F1B when above 1; the "
                 "micro-batches per step must be a multiple of --pp)")
      ->capture_default_str();
  cmd.add_option("--pp-layers", t->pp_layers,
                 "With --pp: layers of each chunk in order, e.g. 9,8,8,7 (default: balanced, "
                 "the head counted by its FLOPs)");
}

// The activation strategy (memory/strategy_factory.h).
void add_activation_flags(CLI::App& cmd, TrainFlags& f) {
  TrainOptions* t = &f.options;
  cmd.add_option("--activations", t->activations.kind,
                 "Where skeletal activations live: keep, recompute, offload or memo")
      ->check(CLI::IsMember({"keep", "recompute", "offload", "memo"}))
      ->capture_default_str();
  f.alpha_opt = cmd.add_option(
      "--alpha", f.alpha,
      "memo: fraction of tokens offloaded, the rest recomputed (default: the cost model's choice)");
  cmd.add_option("--host-memory", f.host_memory,
                 "offload, memo: host memory budget for offloaded activations, e.g. 1.5GiB "
                 "(default: unlimited)");
  cmd.add_option("--copy-bandwidth", t->activations.copy_bandwidth_gb_per_s,
                 "offload, memo: throttle each copy stream to this many GB/s (0: no throttle)");
}

// `file` (trainer_state.json, run_options.json) of the checkpoint a run resumed from
// `resume_dir` continues, parsed; null where it has none (older checkpoints; the session reports
// a missing checkpoint).
nlohmann::json resumed_file(const std::string& resume_dir, const char* file) {
  const std::filesystem::path path = find_latest_checkpoint(resume_dir) / file;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return nullptr;
  return read_json_file<FormatError>(path);
}

// The precision a run to be resumed was trained in, as its trainer_state.json records it ("fp32"
// or "bf16"); empty where it does not say (older checkpoints; the session reports a damaged file).
std::string resumed_precision(const std::string& resume_dir) {
  const nlohmann::json j = resumed_file(resume_dir, kTrainerStateFile);
  const nlohmann::json p =
      j.is_object() ? j.value("precision", nlohmann::json()) : nlohmann::json();
  return p == "fp32" || p == "bf16" ? p.get<std::string>() : "";
}

// The device a run to be resumed ran on ("cpu" or "cuda"), as its run_options.json records it;
// empty where it does not say (older checkpoints).
std::string resumed_device(const std::string& resume_dir) {
  const nlohmann::json j = resumed_file(resume_dir, kRunOptionsFile);
  const nlohmann::json d = j.is_object() ? j.value("device", nlohmann::json()) : nlohmann::json();
  if (d.is_null()) return "";
  if (d != "cpu" && d != "cuda")
    throw DataError(str((find_latest_checkpoint(resume_dir) / kRunOptionsFile).string(),
                        ": field 'device' = ", json_excerpt(d), " is not \"cpu\" or \"cuda\""));
  return d.get<std::string>();
}

// The optimiser a run to be resumed was trained with, as its trainer_state.json records it; none
// where there is no such file.
std::optional<OptimizerChoice> resumed_optimizer(const std::string& resume_dir) {
  const nlohmann::json j = resumed_file(resume_dir, kTrainerStateFile);
  if (j.is_null()) return std::nullopt;
  return optimizer_choice_from_state(j);
}

// The options the flags say, checked; device-dependent defaults are filled in by with_device.
TrainOptions resolve_options(const TrainFlags& f) {
  TrainOptions o = f.options;
  // --resume run/step-00000010/ (as a shell completes it) names the checkpoint, not a folder in it
  while (o.resume_dir.size() > 1 && o.resume_dir.back() == '/') o.resume_dir.pop_back();
  // A resumed run's hyperparameter flags are read against its own optimiser, not the default.
  OptimizerFlags optimizer = f.optimizer;
  if (!o.resume_dir.empty() && f.optimizer.name_option->count() == 0)
    if (const std::optional<OptimizerChoice> held = resumed_optimizer(o.resume_dir))
      optimizer.name = held->name;
  o.optimizer = resolve_optimizer(optimizer);
  o.batch_schedule = resolve_batch_schedule(
      f.schedule, o.optimizer, o.seq_schedule.empty() ? o.seq : 0, !o.resume_dir.empty());
  if (o.batch_schedule && o.resume_dir.empty() && f.lr->count() > 0)
    throw ConfigError(
        "--lr is set by the law under --batch-schedule noise: give --eps-max and --b-noise, or "
        "--fit");
  // checked here, not only where a probe is made (a run of one micro-batch makes none)
  if (!(o.gns_decay >= 0.0 && o.gns_decay < 1.0))
    throw ConfigError(str("--gns-decay ", o.gns_decay, " is outside [0, 1)"));
  if (ignores_learning_rate(o.optimizer)) {
    const char* flag = f.lr->count() > 0       ? "--lr"
                       : o.batch_schedule      ? "--batch-schedule noise"
                       : f.warmup->count() > 0 ? "--warmup"
                       : f.min_lr->count() > 0 ? "--min-lr-ratio"
                                               : nullptr;
    if (flag)
      throw ConfigError(str(flag, " shapes the learning rate, which --optimizer adafactor ignores ",
                            "under its relative step (on by default: the step size is max(eps2, ",
                            "RMS(p)) min(1e-2, 1/sqrt(t))); give --no-relative-step to use it"));
  }
  if (f.alpha_opt->count() > 0) o.activations.alpha = f.alpha;
  if (!f.host_memory.empty())
    o.activations.host_memory_bytes = parse_bytes(f.host_memory, "--host-memory");
  if (!f.device_memory.empty())
    o.device_memory_bytes = parse_bytes(f.device_memory, "--device-memory");
  o.device_memory_given = !f.device_memory.empty();
  if (!f.save_dtype.empty()) o.save_dtype = f.save_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  o.exit_signals = parse_exit_signals(f.exit_signal);
  if (!f.time_limit.empty()) o.time_limit_s = parse_duration(f.time_limit, "--time-limit");
  if (!f.max_shard_size.empty())
    o.max_shard_bytes = parse_bytes(f.max_shard_size, "--max-shard-size");
  if (o.max_shard_bytes == 0)
    throw ConfigError(str("--max-shard-size '", f.max_shard_size,
                          "' is 0 bytes; a shard holds at least one tensor byte (transformers' "
                          "default is 5GB)"));
  o.positions = resolve_position_flags(f.positions);
  if (o.resume_dir.empty() && o.config_path.empty() && o.init_from.empty())
    throw ConfigError("--config is required (or --init-from a model, or --resume a run)");
  if (o.out_dir.empty()) throw ConfigError("--out is empty: name the folder the run writes into");
  o.data_given = f.data->count() > 0;
  o.steps_given = f.steps->count() > 0;
  if (o.resume_dir.empty() && !o.data_given)
    throw ConfigError("--data is required (or --resume a run, which knows its own)");
  if (!o.resume_dir.empty() && f.out->count() == 0) {
    // continue writing into the run being resumed
    const std::filesystem::path r(o.resume_dir);
    o.out_dir = has_model_tensors(r) ? r.parent_path().string() : r.string();
  }
  return o;
}

// What the device sets: the default budget, the GPU's free memory less a reserve for what runs
// outside the plan (NCCL's buffers, the matrix-product peak measured at start, validation's
// caching allocator, rope tables, the backend's scratch): 5%, at least 1 GiB; and the datasheet
// peak for MFU.
void with_device(TrainOptions& o, const TrainFlags& f, Backend& backend) {
  if (f.device_memory.empty())
    if (const int64_t free = backend.device_free_bytes(); free > 0)
      o.device_memory_bytes =
          std::max<int64_t>(free - std::max<int64_t>(int64_t(1) << 30, free / 20), 1);
  if (const std::string name = backend.device_name(); !name.empty()) {
    const std::optional<GpuSpec> spec =
        f.gpu.empty() ? match_gpu(name, f.hardware_dir) : find_gpu(f.gpu, f.hardware_dir);
    if (spec) {
      o.device_peak_flops = spec->peak_bf16_flops;
      o.device_peak_name = spec->name;
    }
  }
}

// Flags a resumed run cannot honour (Note [Resume]): refused by name rather than dropped. An
// optimiser flag must repeat what the checkpoint holds (its state is that optimiser's: a
// requeued job reruns its own command with --resume); a hyperparameter flag is read against
// --optimizer as given, or else the checkpoint's optimiser (resolve_options). The validation split
// is the run's unless --data names new data; --init-from has nothing to start.
void check_resume_flags(const CLI::App& train, const TrainFlags& f, const TrainOptions& o) {
  const std::string keep = str(", which a resumed run keeps; resume without it, or start a new ",
                               "run from its weights with --init-from");
  const CLI::Option* name = train.get_option("--optimizer");
  bool optimizer_given = name->count() > 0;
  for (const auto& [key, option] : f.optimizer.options) optimizer_given |= option->count() > 0;
  const std::optional<OptimizerChoice> held_choice =
      optimizer_given ? resumed_optimizer(o.resume_dir) : std::nullopt;
  if (held_choice) {
    const OptimizerChoice& held = *held_choice;
    if (name->count() > 0 && o.optimizer.name != held.name)
      throw ConfigError(str("--optimizer ", o.optimizer.name, ": ", o.resume_dir,
                            " was trained with ", held.name, keep));
    const nlohmann::json asked = hyperparameters_of(o.optimizer), had = hyperparameters_of(held);
    for (const auto& [key, option] : f.optimizer.options)
      if (option->count() > 0 &&
          (!had.contains(key) || asked.value(key, nlohmann::json()) != had.at(key)))
        throw ConfigError(str(option->get_name(), " ", asked.value(key, nlohmann::json()).dump(),
                              ": ", o.resume_dir, " was trained with ", held.name, " ", had.dump(),
                              keep));
  }
  if (!o.data_given)
    for (const char* flag : {"--val-data", "--val-fraction"})
      if (train.get_option(flag)->count() > 0)
        throw ConfigError(str(flag, ": ", o.resume_dir, " holds its data and validation split",
                              keep, " (or give --data as well)"));
  if (!o.init_from.empty())
    throw ConfigError(str("--init-from ", o.init_from, ": --resume ", o.resume_dir,
                          " continues a run from its own weights; give one of the two"));
}

// The run file a resumed run writes: the resumed checkpoint's (the run as it was started, which
// `--run` repeats), then the keys this command gives, as comments; this command's file alone
// where the checkpoint has none.
std::string resumed_run_file(const std::string& resume_dir, const std::string& flags) {
  const std::filesystem::path checkpoint = find_latest_checkpoint(resume_dir);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(checkpoint / kRunFile, ec)) return flags;
  std::string text = read_file(checkpoint / kRunFile);
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += str("\n# resumed from ", checkpoint.string(), " with:\n");
  size_t at = 0;
  while (at < flags.size()) {
    size_t end = flags.find('\n', at);
    if (end == std::string::npos) end = flags.size();
    const std::string_view line(flags.data() + at, end - at);
    if (!line.empty() && line[0] != '#' && line[0] != '[') text += str("#   ", line, "\n");
    at = end + 1;
  }
  return text;
}

}  // namespace

void add_train_command(CLI::App& app, MpiCommunicator* world) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* train = app.add_subcommand("train", "Train a model");
  // Each group of flags is a section of the run file (Note [Run files]).
  const auto section = [&](const char* name) { train->option_defaults()->group(name); };
  section("data"), add_data_flags(*train, *f);
  section("step"), add_step_flags(*train, *f);
  section("optimizer"), add_optimizer_flags(*train, f->optimizer);
  section("gradients"), add_gradient_flags(*train, &f->options);
  section("run"), add_run_dir_flags(*train, *f);
  section("positions"), add_position_flags(*train, f->positions, "Train with");
  section("runtime"), add_runtime_flags(*train, f->device, true);
  section("gpu"), add_gpu_flags(*train, *f);
  section("layout"), add_layout_flags(*train, &f->options);
  section("activations"), add_activation_flags(*train, *f);
  section("batch-schedule"), add_batch_schedule_flags(*train, f->schedule);
  section("run file");
  // read by main() before parsing (with_run_file); here for --help and print_run's exclusion
  train->add_option("--run", f->run_path,
                    "Take the flags from this TOML run file, or a run's folder's run.toml (Note "
                    "[Run files]): [section] and one key per flag; the command line wins");
  train->add_flag("--print-run", f->print_run,
                  "Print the flags given as a run file (the others' defaults as comments) and "
                  "exit");
  train->callback([f, world, train] {
    if (f->print_run) {
      std::cout << run_file_text(*train, true);
      return;
    }
    TrainOptions o = resolve_options(*f);
    if (!o.resume_dir.empty())  // Note [Resume]: the checkpoint pins these, or keeps the others
      for (const char* flag :
           {"--seq",           "--batch",        "--micro-batch",   "--lr",
            "--min-lr-ratio",  "--warmup",       "--clip",          "--gns",
            "--gns-decay",     "--seed",         "--document-mask", "--eot-id",
            "--eod-mask-loss", "--seq-schedule", "--stage-batch",   "--stage-rope",
            "--save-every",    "--keep-last",    "--save-best",     "--async-save",
            "--eval-every",    "--eval-tokens",  "--val-batches",   "--log-every",
            "--activations",   "--alpha",        "--host-memory",   "--copy-bandwidth",
            "--device-memory", "--log",          "--tensorboard",   "--skip-nonfinite",
            "--spike-skip",    "--zero"})
        if (train->get_option(flag)->count() > 0) {
          std::string key(flag + 2);
          std::replace(key.begin(), key.end(), '-', '_');
          o.pinned_given.push_back(key);
        }
    o.restore_run_options = !o.resume_dir.empty();
    o.run_file = run_file_text(*train, true);
    if (!o.resume_dir.empty()) {
      check_resume_flags(*train, *f, o);
      o.run_file = resumed_run_file(o.resume_dir, o.run_file);
    }
    RuntimeFlags device = f->device;
    bool device_restored = false;
    if (!o.resume_dir.empty()) {  // the run's own (Note [Resume])
      if (train->get_option("--device")->count() == 0)
        if (std::string d = resumed_device(o.resume_dir); !d.empty())
          device_restored = d != device.device, device.device = d;
      if (device.precision.empty()) device.precision = resumed_precision(o.resume_dir);
    }
    o.device = device.device;
    if (!f->gpu.empty() && o.device != "cuda")  // a resumed cuda run's own device counts
      throw ConfigError("--gpu names the GPU of --device cuda");
    std::unique_ptr<Runtime> runtime;
    try {
      runtime = make_runtime(device, world, std::cout);
    } catch (const ConfigError& e) {
      if (!device_restored) throw;
      throw ConfigError(str(e.what(), " (--device ", device.device, " is the run's, from ",
                            o.resume_dir, "; give --device cpu to resume it on this CPU)"));
    }
    with_device(o, *f, runtime->backend());
    memo::train(o, *runtime);
  });
}

}  // namespace memo::cli
