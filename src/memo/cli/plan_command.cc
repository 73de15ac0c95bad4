// memo plan: the static memory plan of a run, without training. Traces one step (forward and
// backward of one micro-batch, zero weights), plans both levels, sizes the device need against
// --device-memory and reports it as text or one JSON object; optionally draws the step's device
// bytes as an SVG. Small configs only: the trace runs the real model once.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "memo/cli/commands.h"
#include "memo/core/units.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "memo/memory/timeline.h"
#include "memo/train/device_plan.h"

namespace memo::cli {
namespace {

struct PlanCommandOptions {
  std::string config_path;
  int64_t seq = 1024;
  int64_t batch = 1;
  std::string activations = "keep";
  std::string device_memory;  // empty: no budget
  std::string solver = "heuristic";
  double mip_seconds = 10.0;
  bool json = false;
  std::string timeline_path;
};

nlohmann::json level_json(const PlanLevel& level) {
  const plan::SolveResult& r = level.result;
  return {{"name", level.name},
          {"buffers", level.problem.buffers.size()},
          {"peak_bytes", r.plan.peak},
          {"lower_bound_bytes", r.lower_bound},
          {"gap_percent", plan::gap_percent(r.plan.peak, r.lower_bound)},
          {"solver", r.solver},
          {"status", plan::status_name(r.status)},
          {"solve_seconds", r.solve_seconds}};
}

nlohmann::json plan_json(const DevicePlan& dp, const std::string& strategy) {
  const ActivationPlan& a = dp.activations;
  nlohmann::json j = {
      {"fits", dp.fits()},
      {"strategy", strategy},
      {"alpha", nullptr},  // only the memo strategy has one (issue #3)
      {"batch", dp.batch},
      {"seq", dp.seq},
      {"threads", omp_get_max_threads()},
      {"device_need_bytes", dp.need.total_bytes()},
      {"device_budget_bytes", dp.budget_bytes},
      {"need", {{"weight_bytes", dp.need.weight_bytes},
                {"gradient_bytes", dp.need.gradient_bytes},
                {"optimizer_bytes", dp.need.optimizer_bytes},
                {"activation_arena_bytes", dp.need.activation_arena_bytes},
                {"rounding_buffer_bytes", dp.need.rounding_buffer_bytes}}},
      {"plan_peak_bytes", a.arena_bytes},
      {"lower_bound_bytes", a.lower_bound_bytes},
      {"gap_percent", plan::gap_percent(a.arena_bytes, a.lower_bound_bytes)},
      {"solve_seconds", a.solve_seconds()},
      {"requests", a.trace.requests.size()},
      {"levels", {level_json(a.forward), level_json(a.backward), level_json(a.iteration)}}};
  if (!dp.fits()) {
    j["shortfall_bytes"] = dp.need.total_bytes() - dp.budget_bytes;
    j["smallest_budget_bytes"] = dp.advice.smallest_budget_bytes;
    j["longest_seq"] = dp.advice.longest_seq ? nlohmann::json(*dp.advice.longest_seq) : nlohmann::json();
    j["message"] = dp.over_budget_message();
  }
  return j;
}

void print_text(const DevicePlan& dp, const PlanCommandOptions& o) {
  const ActivationPlan& a = dp.activations;
  std::cout << "memo plan: " << o.config_path << ", batch " << dp.batch << " x seq " << dp.seq
            << ", activations " << o.activations << ", solver " << o.solver << ", "
            << omp_get_max_threads() << " threads, " << a.trace.requests.size()
            << " activation requests per step\n";
  std::cout << "device need:\n" << need_breakdown(dp.need);
  if (dp.budget_bytes > 0)
    std::cout << "  budget               " << gib(double(dp.budget_bytes)) << "\n";
  std::cout << "alpha                  n/a (" << o.activations << ")\n";
  char line[200];
  std::snprintf(line, sizeof line, "plan peak              %s (%lld B)\nlower bound            %s (%lld B)\ngap                    %.2f %%\n",
                format_bytes(a.arena_bytes).c_str(), static_cast<long long>(a.arena_bytes),
                format_bytes(a.lower_bound_bytes).c_str(), static_cast<long long>(a.lower_bound_bytes),
                plan::gap_percent(a.arena_bytes, a.lower_bound_bytes));
  std::cout << line;
  for (const PlanLevel* level : {&a.forward, &a.backward, &a.iteration}) {
    const plan::SolveResult& r = level->result;
    std::snprintf(line, sizeof line, "%-18s %4zu buffers, peak %s, lower bound %s, %s (%s), %.4f s\n",
                  level->name.c_str(), level->problem.buffers.size(), format_bytes(r.plan.peak).c_str(),
                  format_bytes(r.lower_bound).c_str(), r.solver.c_str(), plan::status_name(r.status),
                  r.solve_seconds);
    std::cout << line;
  }
  if (dp.budget_bytes == 0) std::cout << "fits: yes (no --device-memory given)\n";
  else if (dp.fits()) std::cout << "fits: yes, " << gib(double(dp.budget_bytes - dp.need.total_bytes())) << " to spare\n";
  else std::cout << "fits: no: " << dp.over_budget_message() << "\n";
}

void run_plan(const PlanCommandOptions& o) {
  const ModelConfig config = load_model_config(o.config_path);
  if (o.seq <= 0 || o.batch <= 0)
    throw ConfigError(str("--seq ", o.seq, " and --batch ", o.batch, " must be positive"));
  if (o.seq > config.max_position_embeddings)
    throw ConfigError(str("--seq ", o.seq, " exceeds max_position_embeddings = ",
                          config.max_position_embeddings, " of ", o.config_path));
  DevicePlanOptions options;
  options.plan.solver = plan_solver_from_name(o.solver);
  options.plan.mip_seconds = o.mip_seconds;
  options.strategy.kind = o.activations;
  make_strategy_factory(options.strategy);  // reject an unknown strategy before the model is built
  const int64_t budget = o.device_memory.empty() ? 0 : parse_bytes(o.device_memory);
  Model model(config);  // zero weights: the request sequence does not depend on values
  const DevicePlan dp = plan_device_memory(model, o.batch, o.seq, budget, options);
  if (o.json) std::cout << plan_json(dp, o.activations).dump(2) << "\n";
  else print_text(dp, o);
  if (!o.timeline_path.empty()) {
    const TimelineSeries series = timeline_series(o.activations, dp.activations, dp.need.fixed_bytes());
    write_file_atomic(o.timeline_path,
                      timeline_svg({series}, budget,
                                   str("device bytes over one step: ", o.config_path, ", batch ",
                                       o.batch, " x seq ", o.seq)));
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCommandOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan a run's device memory without training");
  cmd->add_option("--config", o->config_path, "Model config.json")->required();
  cmd->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences per micro-batch")->capture_default_str();
  cmd->add_option("--activations", o->activations, "Activation strategy (keep)")->capture_default_str();
  cmd->add_option("--device-memory", o->device_memory, "Device memory budget, e.g. 1.5GiB (default: none)");
  cmd->add_option("--solver", o->solver, "Planner: heuristic, or mip (CBC after the heuristics)")->capture_default_str();
  cmd->add_option("--mip-seconds", o->mip_seconds, "CBC time limit per level in seconds")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--timeline", o->timeline_path, "Write device bytes over one step as an SVG");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace memo::cli
