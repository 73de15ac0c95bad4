// memo sweep: a learning-rate x batch-size grid of short runs from scratch, in-process
// (train/short_run.h), one JSON line per finished run appended to --out. Runs already in the
// file (same setup, lr, batch and seed) are skipped, so an interrupted sweep resumes. Batch sizes
// are tokens per step (the surge paper's unit for language models).
//
// A line: {"optimizer", "hyperparameters", "lr", "batch_tokens", "seq", "micro_batch", "seed",
// "budget" ({"steps"} or {"tokens"}), "warmup", "min_lr_ratio", "clip", "steps", "tokens",
// "final_loss", "best_loss", "val_loss", "diverged", "curve" ([[step, tokens, loss], ...]),
// "gns_b_simple", "seconds"} and with --target-loss also "target_loss" (a number, or the list
// with several levels), "extra_steps", "target_steps", "target_tokens",
// "loss_reduction" (for the lowest level: the one that ends the run) and "targets" ([{"loss",
// "steps", "tokens", "loss_reduction", "b_simple"}] per level, which `memo fit --target-loss`
// picks from). Losses are smoothed training losses (Note [Smoothed training loss]); null where
// not available (diverged, target not reached). Several --seed values run the grid once per seed.
// Every line also names its setup's context: "model" (the config), "data" and "val_data"
// (absolute paths), "val_fraction", "val_windows", "precision" and "loss_window". A file holds
// one setup: a sweep whose setup differs from its lines' (all but lr, batch and seed) is refused.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/optimizer_flags.h"
#include "memo/cli/runtime.h"
#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/core/units.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "memo/scaling/sweep_file.h"
#include "memo/train/checkpoints.h"
#include "memo/train/run_data.h"
#include "memo/train/short_run.h"

namespace memo::cli {
namespace {

struct SweepOptions {
  std::string config, out;
  RunDataOptions data;
  std::vector<double> lrs;
  std::vector<int64_t> batches;  // tokens per step
  std::vector<uint64_t> seeds{1234};
  int64_t tokens = 0, steps = 0;
  ShortRunOptions run;
};

nlohmann::json optional_json(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}
nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

// A data path as sweep files have always named it: absolute and lexically normal (a setup field,
// compared with the lines already in the file).
std::string setup_path(const std::string& path) {
  return std::filesystem::path(absolute_or_empty(path)).lexically_normal().string();
}

// What every run of the sweep shares beyond its options' key fields: the model, the data, what
// judges the runs and the precision (setup fields, scaling/sweep_file.h; a line of an older memo
// lacks them).
nlohmann::json sweep_context(const SweepOptions& s, const ModelConfig& config,
                             const Backend& backend) {
  return {{"model", model_config_to_json(config)},
          {"data", setup_path(s.data.data_path)},
          {"val_data", setup_path(s.data.val_data_path)},
          {"val_fraction", s.data.val_fraction},
          {"val_windows", s.run.val_windows},
          {"precision", precision_name(backend)},
          {"loss_window", s.run.loss_window}};
}

// What identifies a run: a line with the same values is the same run, and is skipped.
nlohmann::json run_key(const SweepOptions& s, const nlohmann::json& context,
                       const OptimizerChoice& optimizer, double lr, int64_t batch) {
  const ShortRunOptions& o = s.run;
  nlohmann::json key{{"optimizer", optimizer.name},
                     {"hyperparameters", hyperparameters_of(optimizer)},
                     {"lr", lr},
                     {"batch_tokens", batch},
                     {"seq", o.seq},
                     {"micro_batch", o.micro_batch},
                     {"seed", o.seed},
                     {"budget", s.steps > 0 ? nlohmann::json{{"steps", s.steps}}
                                            : nlohmann::json{{"tokens", s.tokens}}},
                     {"warmup", o.warmup},
                     {"min_lr_ratio", o.min_lr_ratio},
                     {"clip", o.clip}};
  if (!o.target_losses.empty()) {
    key["target_loss"] = o.target_losses.size() == 1 ? nlohmann::json(o.target_losses[0])
                                                     : nlohmann::json(o.target_losses);
    key["extra_steps"] = o.extra_steps;
  }
  key.update(context);
  return key;
}

// Whether a line of the file is the run at key's grid point. run_sweep has checked that every
// line's setup is this sweep's (differing_setup_field), so the grid point decides.
bool same_run(const nlohmann::json& line, const nlohmann::json& key) {
  for (const char* k : {"lr", "batch_tokens", "seed"})
    if (!line.contains(k) || line.at(k) != key.at(k)) return false;
  return true;
}

// What differs in a setup field between a line and this sweep: for the model, its first config
// field that differs.
std::string setup_difference(const std::string& field, const nlohmann::json& line,
                             const nlohmann::json& key) {
  if (!line.contains(field) || !key.contains(field))
    return str("'", field,
               "' = ", line.contains(field) ? json_excerpt(line.at(field)) : std::string("nothing"),
               " there, ",
               key.contains(field) ? json_excerpt(key.at(field)) : std::string("nothing"), " here");
  const nlohmann::json &a = line.at(field), &b = key.at(field);
  if (a.is_object() && b.is_object())
    for (const auto& [k, v] : b.items())
      if (!a.contains(k) || a.at(k) != v)
        return str("'", field, ".", k,
                   "' = ", a.contains(k) ? json_excerpt(a.at(k)) : std::string("nothing"),
                   " there, ", json_excerpt(v), " here");
  return str("'", field, "' = ", json_excerpt(a), " there, ", json_excerpt(b), " here");
}

std::string fixed4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}
std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void check_sweep(SweepOptions& s) {
  if ((s.tokens > 0) == (s.steps > 0))
    throw ConfigError(
        "give exactly one of --tokens N (tokens per run) and --steps N (steps per run)");
  if (s.lrs.empty() || s.batches.empty() || s.seeds.empty())
    throw ConfigError("--lrs, --batches and --seed need at least one value each");
  std::sort(s.run.target_losses.begin(), s.run.target_losses.end(), std::greater<>());
  for (size_t i = 1; i < s.run.target_losses.size(); ++i)
    if (s.run.target_losses[i] == s.run.target_losses[i - 1])
      throw ConfigError(str("--target-loss ", s.run.target_losses[i], " is given twice"));
  for (int64_t b : s.batches)
    if (b <= 0 || b % s.run.seq != 0)
      throw ConfigError(str("--batches value ", b, " is not a positive multiple of --seq ",
                            s.run.seq, " (batches are tokens per step)"));
  // a token budget every batch size spends whole
  if (s.tokens > 0) {
    int64_t lcm = 1;
    for (int64_t b : s.batches) {
      lcm = lcm / std::gcd(lcm, b) * b;
      if (lcm > (int64_t(1) << 50)) break;
    }
    for (int64_t b : s.batches)
      if (s.tokens % b != 0)
        throw ConfigError(str("--tokens ", s.tokens, " is not a multiple of --batches value ", b,
                              ": its runs would see ", (s.tokens / b) * b,
                              " tokens, not the others' budget; give a multiple of every batch",
                              lcm <= (int64_t(1) << 50) ? str(" (the least is ", lcm, ")") : ""));
  }
  // every run's options, before the first run starts
  for (int64_t b : s.batches)
    for (double lr : s.lrs) {
      ShortRunOptions o = s.run;
      o.lr = lr;
      o.batch_tokens = b;
      o.max_steps = s.steps > 0 ? s.steps : s.tokens / b;
      check_short_run(o);
    }
}

// Runs already done; a line cut short by a kill is dropped from the file.
std::vector<nlohmann::json> runs_done(const std::string& path) {
  std::vector<nlohmann::json> done;
  if (!std::filesystem::exists(path)) return done;
  scaling::SweepFile f = scaling::read_sweep_file(path);
  for (auto& l : f.lines) done.push_back(std::move(l.run));
  if (f.truncated_tail) {
    std::string kept;
    for (const nlohmann::json& j : done) kept += j.dump() + "\n";
    write_file_atomic(path, kept);
    std::cout << "sweep: dropped an incomplete last line of " << path << "\n";
  }
  return done;
}

// The sweep file's line of one run: its key and what it measured.
nlohmann::json run_line(const nlohmann::json& key, const ShortRunResult& r, int64_t batch) {
  nlohmann::json line = key;
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& p : r.curve) curve.push_back({p.step, p.tokens, p.loss});
  line.update({{"steps", r.steps},
               {"tokens", r.tokens},
               {"final_loss", finite_or_null(r.final_loss)},
               {"best_loss", finite_or_null(r.best_loss)},
               {"val_loss", optional_json(r.val_loss)},
               {"diverged", r.diverged},
               {"curve", curve},
               {"gns_b_simple", optional_json(r.gns_b_simple)},
               {"seconds", r.seconds}});
  if (!r.targets.empty()) {
    nlohmann::json levels = nlohmann::json::array();
    for (const ShortRunResult::TargetLevel& t : r.targets)
      levels.push_back({{"loss", t.target},
                        {"steps", t.steps ? nlohmann::json(*t.steps) : nlohmann::json()},
                        {"tokens", t.steps ? nlohmann::json(*t.steps * batch) : nlohmann::json()},
                        {"loss_reduction", optional_json(t.loss_reduction)},
                        {"b_simple", optional_json(t.b_simple_at_target)}});
    const nlohmann::json& last = levels.back();
    line["target_steps"] = last.at("steps");
    line["target_tokens"] = last.at("tokens");
    line["loss_reduction"] = last.at("loss_reduction");
    line["targets"] = levels;
  }
  return line;
}

// The progress line of a finished run.
std::string run_message(int64_t index, int64_t total, double lr, int64_t batch, uint64_t seed,
                        const ShortRunResult& r, double eta_s) {
  char head[160];
  std::snprintf(head, sizeof head,
                "run %lld/%lld: lr %.3g batch %lld tokens seed %llu: %lld steps, ",
                (long long)index, (long long)total, lr, (long long)batch, (unsigned long long)seed,
                (long long)r.steps);
  std::string msg = head;
  msg += r.diverged ? std::string("diverged") : str("loss ", fixed4(r.final_loss));
  if (r.val_loss) msg += str(", val ", fixed4(*r.val_loss));
  if (r.gns_b_simple) msg += str(", B_simple ", int64_t(*r.gns_b_simple), " tok");
  for (const ShortRunResult::TargetLevel& t : r.targets)
    msg += t.steps ? str(", ", t.target, " at step ", *t.steps, " (reduction ",
                         t.loss_reduction ? fixed4(*t.loss_reduction) : std::string("-"), ")")
                   : str(", ", t.target, " not reached");
  msg += str(", ", fixed1(r.seconds), "s | ETA ", duration_str(eta_s));
  return msg;
}

void print_sweep_header(const SweepOptions& s, const OptimizerChoice& optimizer, int64_t total) {
  std::cout << "sweep: " << total << " runs (" << s.batches.size() << " batch sizes x "
            << s.lrs.size() << " lrs x " << s.seeds.size() << " seeds), " << optimizer.name << " "
            << hyperparameters_of(optimizer).dump() << ", "
            << (s.steps > 0 ? str(s.steps, " steps") : str(s.tokens, " tokens")) << " per run"
            << (s.run.target_losses.empty()
                    ? std::string()
                    : str(", target loss ", nlohmann::json(s.run.target_losses).dump(), " + ",
                          s.run.extra_steps, " steps"))
            << "\n"
            << std::flush;
}

void run_sweep(Runtime& runtime, SweepOptions s, const OptimizerChoice& optimizer) {
  check_sweep(s);
  if (ignores_learning_rate(optimizer))
    throw ConfigError(str("--optimizer ", optimizer.name, " ignores the learning rate under its ",
                          "relative step (on by default), so every --lrs value would give the ",
                          "same run; give --no-relative-step"));
  s.run.optimizer = optimizer;
  const ModelConfig config = load_model_config(s.config);
  // Data: loaded once for every run, validated before the sweep file is touched.
  const RunData data = load_run_data(s.data, config.vocab_size);
  if (data.train.has_loss_mask())
    throw ConfigError(str(s.data.data_path, " holds prompt-completion examples; memo sweep runs ",
                          "on text data only (it has no document masks to keep packed examples ",
                          "apart)"));
  const nlohmann::json context = sweep_context(s, config, runtime.backend());
  std::vector<nlohmann::json> done = runs_done(s.out);
  // a sweep file holds one setup: the runs memo fit compares differ only in lr, batch and seed
  const nlohmann::json probe = run_key(s, context, optimizer, s.lrs.front(), s.batches.front());
  for (size_t i = 0; i < done.size(); ++i)
    if (const std::string field = scaling::differing_setup_field(done[i], probe); !field.empty())
      throw ConfigError(str(s.out, " holds runs of another setup (its run ", i + 1, ": ",
                            setup_difference(field, done[i], probe),
                            "); give this sweep another --out"));
  const int64_t total = int64_t(s.seeds.size() * s.lrs.size() * s.batches.size());
  int64_t index = 0, ran = 0, skipped = 0;
  double run_seconds = 0.0;
  print_sweep_header(s, optimizer, total);
  for (uint64_t seed : s.seeds)
    for (int64_t batch : s.batches) {
      for (double lr : s.lrs) {
        ++index;
        s.run.seed = seed;
        const nlohmann::json key = run_key(s, context, optimizer, lr, batch);
        bool already = false;
        for (const nlohmann::json& d : done) already = already || same_run(d, key);
        if (already) {
          ++skipped;
          std::cout << "run " << index << "/" << total << ": lr " << lr << " batch " << batch
                    << " tokens seed " << seed << ": already in " << s.out << ", skipped\n";
          continue;
        }
        ShortRunOptions o = s.run;
        o.lr = lr;
        o.batch_tokens = batch;
        o.max_steps = s.steps > 0 ? s.steps : s.tokens / batch;
        const ShortRunResult r =
            run_short(runtime.backend(), config, data.train, data.val ? &*data.val : nullptr, o);
        const nlohmann::json line = run_line(key, r, batch);
        {
          std::ofstream out(s.out, std::ios::app);
          out << line.dump() << "\n" << std::flush;
          if (!out) throw DataError(str("cannot append to sweep file ", s.out));
        }
        done.push_back(line);
        ++ran;
        run_seconds += r.seconds;
        const double eta = run_seconds / double(ran) * double(total - index);
        std::cout << run_message(index, total, lr, batch, seed, r, eta) << "\n" << std::flush;
      }
    }
  std::cout << "sweep: " << ran << " runs done, " << skipped << " skipped; results in " << s.out
            << "\n";
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto s = std::make_shared<SweepOptions>();
  auto optim = std::make_shared<OptimizerFlags>();
  auto target = std::make_shared<std::vector<double>>();
  CLI::App* cmd =
      app.add_subcommand("sweep", "Learning-rate x batch-size sweep of short runs (JSON lines)");
  cmd->add_option("--config", s->config, "Model config.json")->required();
  cmd->add_option("--data", s->data.data_path,
                  "Training data: raw text (bytes), an llm.c token file, a `memo tokenize` folder "
                  "or a glob of shards")
      ->required();
  cmd->add_option("--val-data", s->data.val_data_path,
                  "Validation data (default: a shard folder's validation shards, else the last "
                  "--val-fraction of --data)");
  cmd->add_option("--val-fraction", s->data.val_fraction,
                  "Fraction of --data held out for validation when there are no val shards")
      ->capture_default_str();
  cmd->add_option("--val-windows", s->run.val_windows,
                  "Validation windows (of --seq tokens) for val_loss; 0: none")
      ->capture_default_str();
  cmd->add_option("--out", s->out, "Sweep file (JSON lines); runs already in it are skipped")
      ->required();
  cmd->add_option("--lrs", s->lrs, "Learning rates, comma-separated")->delimiter(',')->required();
  cmd->add_option("--batches", s->batches,
                  "Batch sizes in tokens per step, comma-separated, each a multiple of --seq")
      ->delimiter(',')
      ->required();
  cmd->add_option("--tokens", s->tokens, "Tokens per run (steps = tokens / batch)")
      ->check(number_check(true));
  cmd->add_option("--steps", s->steps, "Steps per run (the cap with --target-loss)")
      ->check(number_check(true));
  cmd->add_option("--seq", s->run.seq, "Tokens per sequence")
      ->check(number_check(true))
      ->capture_default_str();
  cmd->add_option(
         "--micro-batch", s->run.micro_batch,
         "Sequences per forward/backward (0: the whole batch); >= 2 micro-batches give B_simple")
      ->capture_default_str();
  add_optimizer_flags(*cmd, *optim);
  cmd->add_option("--warmup", s->run.warmup, "Linear warm-up steps")->capture_default_str();
  cmd->add_option("--min-lr-ratio", s->run.min_lr_ratio,
                  "Cosine decay to lr * this (1: constant lr)")
      ->capture_default_str();
  cmd->add_option("--clip", s->run.clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  cmd->add_option("--seed", s->seeds,
                  "Seeds of the weight init and the data windows, comma-separated: the grid runs "
                  "once per seed (memo fit averages them and shows their spread)")
      ->delimiter(',')
      ->check(number_check(false))
      ->capture_default_str();
  cmd->add_flag("--gns,!--no-gns", s->run.gns,
                "Record B_simple (tokens) when a step has >= 2 micro-batches (on by default)");
  cmd->add_option("--loss-window", s->run.loss_window,
                  "Steps in the window mean that smooths the training loss")
      ->capture_default_str();
  CLI::Option* target_opt =
      cmd->add_option("--target-loss", *target,
                      "Train until the smoothed training loss reaches this, then --extra-steps "
                      "more (surge paper protocol); several, comma-separated, judge each run at "
                      "each level (memo fit --target-loss picks one)")
          ->delimiter(',');
  cmd->add_option("--extra-steps", s->run.extra_steps,
                  "Steps after the target whose loss reduction is recorded")
      ->capture_default_str();
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*cmd, *device);
  cmd->callback([s, optim, target, target_opt, device] {
    SweepOptions o = *s;
    if (target_opt->count() > 0) o.run.target_losses = *target;
    const OptimizerChoice optimizer = resolve_optimizer(*optim);
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, nullptr, std::cout);
    run_sweep(*runtime, o, optimizer);
  });
}

}  // namespace memo::cli
