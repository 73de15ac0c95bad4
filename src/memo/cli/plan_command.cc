// memo plan: the static memory plan of a run, without training, in two modes.
// On this machine (--config): traces one real step (forward and backward of one micro-batch, zero
// weights), plans both levels, sizes the device need against --device-memory and reports it as
// text or one JSON object; optionally draws the step's device bytes as an SVG.
// On hardware we do not have (--gpus / --gpu / --model): traces one GPU's rank in shape-only mode
// and reports, per activation strategy, its memory, alpha, host memory, step time, MFU and the
// longest sequence that fits (train/cluster_plan.h).
#include <omp.h>

#include <cctype>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "memo/backend/bf16_storage.h"
#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/position_flags.h"
#include "memo/cli/runtime.h"
#include "memo/core/units.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cuda/cuda_sizes.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/io/hardware_json.h"
#include "memo/memory/memo.h"
#include "memo/memory/timeline.h"
#include "memo/meta/meta_backend.h"
#include "memo/model/presets.h"
#include "memo/parallel/shape_communicator.h"
#include "memo/train/cluster_plan.h"
#include "memo/train/device_plan.h"
#include "memo/train/optimizer_setup.h"
#include "memo/train/step_schedule.h"

namespace memo::cli {
namespace {

struct PlanCommandOptions {
  std::string config_path;
  int64_t seq = 1024;
  int64_t batch = 1;
  std::string activations = "keep";
  std::string optimizer = "adamw";  // whose state the device need counts (default options)
  std::string device_memory;        // empty: no budget
  std::string precision;  // of the run planned: fp32, or bf16 mixed precision; unset: the device's
  std::string device = "cpu";  // whose kernels' sizes: cpu, or cuda (CudaSizes)
  std::string solver = "heuristic";
  double mip_seconds = 10.0;
  bool json = false;
  std::string timeline_path;
  // hardware we do not have
  std::string model;  // a preset name or a config.json
  int64_t gpus = 0;   // 0: not the cluster mode
  std::string gpu;
  std::string hardware_dir = MEMO_HARDWARE_DIR;
  int64_t gpus_per_node = 8;
  int64_t tp = 1, cp = 1;
  int64_t pp = 1, virtual_stages = 1, micro_batches = 0;  // 0: 1, or 4 x --pp with a pipeline
  std::string pp_layers;                                  // memo train's --pp-layers
  std::string host_memory = "0";
  double host_bandwidth_gb = 0.0;
  double network_gb = 25.0;
  double efficiency = 0.6;
  int zero = 1;
  std::string workspace = "1GiB";
  std::optional<double> alpha;
  bool compare = false;
  bool layouts = false;
  bool activations_given = false;
  // the flags of the cluster mode alone, refused by name in a --config plan
  std::vector<const CLI::Option*> cluster_only;
  std::vector<const CLI::Option*> config_only;  // of a --config plan, refused with --gpus
  PositionFlags positions;                      // --config plans: the config's, changed
};

// offload and memo in a --config plan: what each micro-batch sends to the host, against
// --host-memory, as memo train checks it before step 1 (Note [Host memory before step 1]).
struct HostPlan {
  int64_t bytes = 0;    // per micro-batch; 0: the strategy sends nothing
  int64_t budget = 0;   // --host-memory; 0: unlimited
  bool least = false;   // memo's cost model: alpha 0's bytes, the least it sends
  std::string refusal;  // memo train's refusal of the run; empty when it fits
  bool fits() const { return refusal.empty(); }
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
      {"alpha", nullptr},  // only the memo strategy has one
      {"batch", dp.batch},
      {"seq", dp.seq},
      {"threads", omp_get_max_threads()},
      {"device_need_bytes", dp.need.total_bytes()},
      {"device_budget_bytes", dp.budget_bytes},
      {"need",
       {{"weight_bytes", dp.need.weight_bytes},
        {"working_weight_bytes", dp.need.working_weight_bytes},
        {"conversion_scratch_bytes", dp.need.conversion_scratch_bytes},
        {"gradient_bytes", dp.need.gradient_bytes},
        {"optimizer", dp.need.optimizer},
        {"optimizer_bytes", dp.need.optimizer_bytes},
        {"activation_arena_bytes", dp.need.activation_arena_bytes}}},
      {"plan_peak_bytes", a.arena_bytes},
      {"lower_bound_bytes", a.lower_bound_bytes},
      {"gap_percent", plan::gap_percent(a.arena_bytes, a.lower_bound_bytes)},
      {"solve_seconds", a.solve_seconds()},
      {"requests", a.trace.requests.size()},
      {"levels", {level_json(a.forward), level_json(a.backward), level_json(a.iteration)}}};
  if (!dp.fits()) {
    j["shortfall_bytes"] = dp.need.total_bytes() - dp.budget_bytes;
    j["smallest_budget_bytes"] = dp.advice.smallest_budget_bytes;
    j["longest_seq"] =
        dp.advice.longest_seq ? nlohmann::json(*dp.advice.longest_seq) : nlohmann::json();
    j["message"] = dp.over_budget_message();
  }
  return j;
}

void print_text(const DevicePlan& dp, const PlanCommandOptions& o, const HostPlan& host) {
  const ActivationPlan& a = dp.activations;
  std::cout << "memo plan: " << o.config_path << ", batch " << dp.batch << " x seq " << dp.seq
            << ", activations " << o.activations << ", solver " << o.solver << ", "
            << omp_get_max_threads() << " threads, " << a.trace.requests.size()
            << " activation requests per step\n";
  std::cout << "device need:\n" << need_breakdown(dp.need);
  if (dp.budget_bytes > 0)
    std::cout << "  budget               " << gib(double(dp.budget_bytes)) << "\n";
  if (o.activations != "memo")
    std::cout << "alpha                  n/a (" << o.activations << ")\n";
  else if (o.alpha)
    std::cout << "alpha                  " << *o.alpha << " (given)\n";
  else
    std::cout << "alpha                  the cost model's, chosen when the run starts\n";
  if (host.bytes > 0) {
    std::cout << "host need              " << format_bytes(host.bytes) << " (" << host.bytes
              << " B) per micro-batch" << (host.least ? " at alpha 0, the least memo offloads" : "")
              << "\n";
    if (host.budget > 0)
      std::cout << "  budget               " << format_bytes(host.budget) << " (--host-memory)\n";
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "plan peak              %s (%lld B)\nlower bound            %s (%lld B)\ngap       "
                "             %.2f %%\n",
                format_bytes(a.arena_bytes).c_str(), static_cast<long long>(a.arena_bytes),
                format_bytes(a.lower_bound_bytes).c_str(),
                static_cast<long long>(a.lower_bound_bytes),
                plan::gap_percent(a.arena_bytes, a.lower_bound_bytes));
  std::cout << line;
  for (const PlanLevel* level : {&a.forward, &a.backward, &a.iteration}) {
    const plan::SolveResult& r = level->result;
    std::snprintf(line, sizeof line,
                  "%-18s %4zu buffers, peak %s, lower bound %s, %s (%s), %.4f s\n",
                  level->name.c_str(), level->problem.buffers.size(),
                  format_bytes(r.plan.peak).c_str(), format_bytes(r.lower_bound).c_str(),
                  r.solver.c_str(), plan::status_name(r.status), r.solve_seconds);
    std::cout << line;
  }
  if (!host.fits())
    std::cout << "fits: no: " << (dp.fits() ? "" : dp.over_budget_message() + "; and ")
              << host.refusal << "\n";
  else if (dp.budget_bytes == 0)
    std::cout << "fits: yes (no --device-memory given)\n";
  else if (dp.fits())
    std::cout << "fits: yes, " << gib(double(dp.budget_bytes - dp.need.total_bytes()))
              << " to spare\n";
  else
    std::cout << "fits: no: " << dp.over_budget_message() << "\n";
}

void check_shape_flags(const PlanCommandOptions& o, const ModelConfig& config) {
  if (o.seq <= 0 || o.batch <= 0)
    throw ConfigError(str("--seq ", o.seq, " and --batch ", o.batch, " must be positive"));
  check_micro_batch_tokens(o.batch, o.seq, "plans");
  if (o.seq > config.max_positions())
    throw ConfigError(
        str("--seq ", o.seq, " exceeds ", config.positions_limit(), " of ", o.config_path,
            resolve_position_flags(o.positions).any() ? " with the position flags" : "",
            config.uses_rope() && o.positions.max_positions_opt->count() == 0
                ? "; --max-position-embeddings N (and a --rope-scaling) plans the run that "
                  "extends it"
                : ""));
}

DevicePlanOptions device_plan_options(const PlanCommandOptions& o, const ModelConfig& config) {
  DevicePlanOptions options;
  options.plan.solver = plan_solver_from_name(o.solver);
  options.plan.mip_seconds = o.mip_seconds;
  options.strategy.kind = o.activations;
  options.strategy.alpha = o.alpha;      // refused by make_strategy for a strategy other than memo
  options.optimizer.name = o.optimizer;  // its default hyperparameters
  make_strategy_factory(options.strategy);  // reject an unknown strategy before the model is built
  optimizer_state_bytes(o.optimizer, ParamLayout(config),
                        options.optimizer.options);  // or a bad name
  return options;
}

void check_parallel_flags(const PlanCommandOptions& o) {
  if (o.cp < 1) throw ConfigError(str("--cp ", o.cp, " must be >= 1"));
  if (o.tp < 1) throw ConfigError(str("--tp ", o.tp, " must be >= 1"));
  check_context_parallel_seq(o.seq, int(o.cp));
  check_tensor_parallel_optimizer(o.optimizer, o.tp);
}

// Rank 0 of `mpirun -np T*C memo train --tp T --cp C`: the model (its part of the parameters),
// strategy, the layers' collectives and the ring of the run, traced with shapes only on groups
// that move nothing (their counters: the bytes a rank sends). Members in the order they are
// built: each backend wraps the one above it.
struct TracedModel {
  TracedModel(const ModelConfig& config, const PlanCommandOptions& o) {
    // --precision bf16: bf16 storage over the backend, as memo train --precision bf16 runs
    const bool bf16 = (o.precision.empty() ? default_precision(o.device) : o.precision) == "bf16";
    // --device cuda: traced on the meta backend with the CUDA backend's sizes and native bf16
    // kernels (cuda/cuda_sizes.h), as memo train --device cuda plans its run on a GPU
    // Every plan is of a shadow (Note [Planning on a shadow]): no parameter is allocated, so a
    // model larger than this machine plans here too.
    const bool cuda = o.device == "cuda";
    meta.emplace(cuda ? static_cast<Backend&>(cuda_sizes) : cpu_backend(), DType::kF32);
    if (bf16) mixed.emplace(*meta);
    model.emplace(config, mixed ? static_cast<Backend&>(*mixed) : *meta);
    tp_group.emplace(int(o.tp));
    if (o.tp > 1) model->set_parallel(Parallel{o.tp, 1}, &*tp_group);
    cp_group.emplace(int(o.cp));
    model->set_context_parallel(&*cp_group);  // a group of one is none
  }

  CudaSizes cuda_sizes;
  std::optional<MetaBackend> meta;
  std::optional<Bf16StorageBackend> mixed;
  std::optional<ShapeCommunicator> tp_group, cp_group;
  std::optional<Model> model;
};

// The bytes one micro-batch's forward and backward send, as the run sends them.
struct StepTraffic {
  CommCounters ring, tp;
};

StepTraffic trace_traffic(TracedModel& traced, const PlanCommandOptions& o,
                          const DevicePlanOptions& options) {
  StepTraffic traffic;
  if (o.cp > 1 || o.tp > 1) {
    traced.cp_group->reset_counters();
    traced.tp_group->reset_counters();
    trace_model_step(*traced.model, o.batch, o.seq, make_strategy_factory(options.strategy));
    traffic.ring = traced.cp_group->counters();
    traffic.tp = traced.tp_group->counters();
  }
  return traffic;
}

void print_plan_json(const DevicePlan& dp, const PlanCommandOptions& o, const HostPlan& host,
                     const StepTraffic& traffic) {
  nlohmann::json j = plan_json(dp, o.activations);
  j["fits"] = dp.fits() && host.fits();
  j["device_fits"] = dp.fits();
  j["host_fits"] = host.fits();
  if (o.alpha) j["alpha"] = *o.alpha;
  j["host_need_bytes"] = host.bytes;
  j["host_need_is_least"] = host.least;
  j["host_budget_bytes"] = host.budget;
  if (!host.fits()) j["host_message"] = host.refusal;
  j["cp"] = o.cp;
  j["tp"] = o.tp;
  if (o.cp > 1) j["cp_bytes_per_micro_batch"] = traffic.ring.bytes_sent;
  if (o.tp > 1) j["tp_bytes_per_micro_batch"] = traffic.tp.bytes_sent;
  std::cout << j.dump(2) << "\n";
}

void print_plan_text(const DevicePlan& dp, const PlanCommandOptions& o, const HostPlan& host,
                     const Model& model, const StepTraffic& traffic) {
  print_text(dp, o, host);
  if (o.cp > 1)
    std::cout << "context parallel: one of " << o.cp << " ranks, " << o.seq / o.cp
              << " tokens of each sequence; the ring and the loss send " << traffic.ring.bytes_sent
              << " B per micro-batch (forward and backward)\n";
  if (o.tp > 1)
    std::cout << "tensor parallel: one of " << o.tp << " ranks, " << model.layout().count()
              << " parameters; the layers' gathers and "
              << "reduce-scatters, the embedding's and the loss's send " << traffic.tp.bytes_sent
              << " B per micro-batch (forward and backward)\n";
}

void write_timeline(const PlanCommandOptions& o, const DevicePlan& dp, int64_t budget) {
  const TimelineSeries series = timeline_series(
      o.activations, dp.activations, dp.need.fixed_bytes() + dp.need.conversion_scratch_bytes);
  write_file_atomic(o.timeline_path, timeline_svg({series}, budget,
                                                  str("device bytes over one step: ", o.config_path,
                                                      ", batch ", o.batch, " x seq ", o.seq)));
}

// --host-memory of a --config plan: memo train's (per process; 0: unlimited).
int64_t host_budget(const PlanCommandOptions& o) {
  const int64_t budget = parse_bytes(o.host_memory, "--host-memory");
  if (budget > 0 && o.activations != "offload" && o.activations != "memo")
    throw ConfigError(
        str("--host-memory applies to --activations offload or memo, not ", o.activations));
  return budget;
}

HostPlan plan_host(const PlanCommandOptions& o, const DevicePlanOptions& options,
                   const Model& model) {
  HostPlan h;
  h.budget = host_budget(o);
  StrategyOptions strategy = options.strategy;
  strategy.host_memory_bytes = h.budget;
  const int64_t g = model.backend().reproducible_rows();
  h.bytes = host_micro_batch_bytes(strategy, model.skeletal(), g, o.batch, o.seq, o.cp, o.tp);
  h.least = o.activations == "memo" && !o.alpha &&
            !memo_moves_all_rows(model.skeletal().token_rows(o.batch, o.seq / o.cp), g, o.tp);
  h.refusal = host_over_budget(strategy, model.skeletal(), g, o.batch, o.seq, o.cp, o.tp);
  return h;
}

// --config's model: a config.json, or the config of a model or run folder (its newest
// checkpoint's), with the position flags' changes (a length past the config's context, planned
// before the run that extends it).
ModelConfig plan_config(const PlanCommandOptions& o) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::is_directory(o.config_path, ec)
                                         ? find_latest_checkpoint(o.config_path) / kConfigFile
                                         : std::filesystem::path(o.config_path);
  const ModelConfig config = load_model_config(path);
  const PositionOverrides p = resolve_position_flags(o.positions);
  if (!p.any()) return config;
  if (!config.uses_rope())
    throw ConfigError(
        str(o.config_path, ": the model's positions are learned (no RoPE to change)"));
  return p.applied_to(config);
}

void run_plan(const PlanCommandOptions& o) {
  const ModelConfig config = plan_config(o);
  check_shape_flags(o, config);
  const DevicePlanOptions options = device_plan_options(o, config);
  const int64_t budget =
      o.device_memory.empty() ? 0 : parse_bytes(o.device_memory, "--device-memory");
  check_parallel_flags(o);
  TracedModel traced(config, o);
  // the trace's strategy has no host budget (the device plan does not depend on it): the host
  // need is checked against --host-memory as memo train checks it, before its trace
  const HostPlan host = plan_host(o, options, *traced.model);
  const DevicePlan dp = plan_device_memory(*traced.model, o.batch, o.seq, budget, options);
  const StepTraffic traffic = trace_traffic(traced, o, options);
  if (o.json)
    print_plan_json(dp, o, host, traffic);
  else
    print_plan_text(dp, o, host, *traced.model, traffic);
  if (!o.timeline_path.empty()) write_timeline(o, dp, budget);
}

// `mpirun -np P memo train --config ... --pp P [--virtual-stages V]` with --micro-batches per
// step (memo train's --batch / --micro-batch; default 4 P) of --batch sequences: each stage's
// plan of its whole step, as the run makes it before step 1 (trace_pipeline_stage on its part,
// the layers split as memo train splits them), in stage order. With --tp T and --cp C: the plan
// of each stage's first rank (the others hold the same shapes: the head's part is held at its
// padded width, and every context-parallel rank two chunks of each sequence). --device cuda: with
// the CUDA backend's kernel sizes, as a GPU run plans its stages.
void run_pipeline_plan(const PlanCommandOptions& o) {
  const ModelConfig config = plan_config(o);
  check_shape_flags(o, config);
  validate_pipeline(o.pp, o.virtual_stages, o.micro_batches > 0 ? o.micro_batches : 4 * o.pp);
  const PipelineShape shape{int(o.pp), int(o.virtual_stages)};
  const int m = int(o.micro_batches > 0 ? o.micro_batches : 4 * o.pp);
  const std::vector<int> counts = pipeline_layer_counts(config, o.seq, shape, o.pp_layers);
  const int64_t budget =
      o.device_memory.empty() ? 0 : parse_bytes(o.device_memory, "--device-memory");
  nlohmann::json stages = nlohmann::json::array();
  bool fits = true;
  std::ostringstream text;
  for (int p = 0; p < shape.stages; ++p) {
    TracedModel traced(config, o);
    const PipelinePart part = pipeline_part(shape, counts, p);
    traced.model->set_pipeline(part);
    DevicePlanOptions options = device_plan_options(o, config);
    options.pipeline = DevicePlanOptions::PipelineStep{shape, m, p};
    const DevicePlan dp = plan_device_memory(*traced.model, o.batch, o.seq, budget, options);
    fits = fits && dp.fits();
    nlohmann::json j = plan_json(dp, o.activations);
    j["stage"] = p;
    std::string layers;
    for (const auto& [first, last] : part.chunks) {
      j["layers"].push_back({first, last});
      layers += str(layers.empty() ? "" : ", ", first, "-", last - 1);
    }
    stages.push_back(j);
    text << "stage " << p << " (layers " << layers << "): activation arena "
         << format_bytes(dp.activations.arena_bytes) << " (" << dp.activations.arena_bytes
         << " B), " << dp.activations.trace.requests.size() << " requests, needs "
         << gib(double(dp.need.total_bytes()))
         << (budget > 0 ? dp.fits() ? ": fits" : ": does not fit: " + dp.over_budget_message()
                        : std::string())
         << "\n";
  }
  if (o.json) {
    std::cout << nlohmann::json{{"fits", fits},
                                {"pp", o.pp},
                                {"virtual_stages", o.virtual_stages},
                                {"micro_batches", m},
                                {"layers", counts},
                                {"stages", stages}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "memo plan: " << o.config_path << ", " << o.pp << " pipeline stages"
            << (o.virtual_stages > 1 ? str(" x ", o.virtual_stages, " virtual") : std::string())
            << ", " << m << " micro-batches of batch " << o.batch << " x seq " << o.seq
            << " per step, activations " << o.activations
            << "; each stage's plan covers its whole step\n"
            << text.str();
}

// --- hardware we do not have ---

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

ModelConfig resolve_model(const std::string& name) {
  for (const std::string& n : llama_preset_names())
    if (lower(name) == n) return llama_preset(name);
  // The paper's GPT sizes, with rotary positions: a learned table for a million positions would
  // be a million x C parameters (model/presets.h).
  constexpr int64_t kPositions = int64_t(1) << 30;
  for (const GptPreset& g : gpt_presets())
    if (lower(name) == g.name || "gpt-" + lower(name) == g.name)
      return gpt_preset_config(g, kPositions);
  if (name.find('/') != std::string::npos || name.ends_with(".json"))
    return load_model_config(name);
  std::string known;
  for (const GptPreset& g : gpt_presets()) known += g.name.substr(4) + ", ";
  for (const std::string& n : llama_preset_names()) known += n + ", ";
  throw ConfigError(str("--model '", name, "' is neither a preset (", known,
                        "or gpt-7b style) nor a config.json path"));
}

nlohmann::json cluster_json(const ClusterPlan& p) {
  const ClusterMemory& d = p.device;
  return {{"strategy", p.strategy},
          {"fits", p.fits()},
          {"device_fits", p.device_fits},
          {"host_fits", p.host_fits},
          {"why_not", p.why_not.empty() ? nlohmann::json() : nlohmann::json(p.why_not)},
          {"seq", p.seq},
          {"rank_tokens", p.rank_tokens},
          {"alpha", p.alpha ? nlohmann::json(*p.alpha) : nlohmann::json()},
          {"alpha_bound", p.alpha ? nlohmann::json(p.alpha_bound) : nlohmann::json()},
          {"device_need_bytes", d.total()},
          {"device_capacity_bytes", p.device_capacity_bytes},
          {"need",
           {{"weight_bytes", d.weight_bytes},
            {"gradient_bytes", d.gradient_bytes},
            {"optimizer_bytes", d.optimizer_bytes},
            {"activation_arena_bytes", d.activation_bytes},
            {"rounding_buffer_bytes", d.rounding_bytes},
            {"workspace_bytes", d.workspace_bytes}}},
          {"host_need_bytes", p.host_need_bytes},
          {"host_capacity_bytes", p.host_capacity_bytes},
          {"step_seconds", p.time.step_s},
          {"time",
           {{"forward_s", p.time.forward_s},
            {"backward_s", p.time.backward_s},
            {"recompute_s", p.time.recompute_s},
            {"tp_comm_s", p.time.tp_comm_s},
            {"cp_comm_s", p.time.cp_comm_s},
            {"copy_stall_s", p.time.copy_stall_s}}},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu_causal},
          {"mfu_causal", p.mfu_causal},
          {"mfu_noncausal", p.mfu_noncausal},
          {"model_flops_per_token_causal", p.model_flops_per_token_causal},
          {"model_flops_per_token_noncausal", p.model_flops_per_token_noncausal},
          {"max_seq", p.max_seq ? nlohmann::json(*p.max_seq) : nlohmann::json()},
          {"max_seq_step", p.max_seq_step},
          {"requests", p.plan_requests},
          {"cp_bytes_per_micro_batch", p.cp_bytes_per_micro_batch},
          {"tp_bytes_per_micro_batch", p.tp_bytes_per_micro_batch},
          {"pipeline",
           {{"stage", p.pp_stage},
            {"in_flight", p.pp_in_flight},
            {"stage_layers", p.pp_stage_layers},
            {"stage_device_need_bytes", p.pp_stage_totals},
            {"bubble", p.pp_bubble},
            {"bytes_per_micro_batch", p.pp_bytes_per_micro_batch},
            {"bubble_s", p.time.bubble_s},
            {"pp_comm_s", p.time.pp_comm_s}}},
          {"planning_seconds", p.planning_seconds}};
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100.0 * x);
  return b;
}

std::string secs(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", x);
  return b;
}

// One row of the side-by-side table: a label and one cell per strategy.
void row(const std::string& label, const std::vector<ClusterPlan>& plans,
         const std::function<std::string(const ClusterPlan&)>& cell) {
  char b[64];
  std::snprintf(b, sizeof b, "%-22s", label.c_str());
  std::cout << b;
  for (const ClusterPlan& p : plans) {
    std::snprintf(b, sizeof b, " %16s", cell(p).c_str());
    std::cout << b;
  }
  std::cout << "\n";
}

void print_cluster(const std::vector<ClusterPlan>& plans, const ModelConfig& config,
                   const ClusterOptions& co, const PlanCommandOptions& o) {
  const int64_t dp = co.gpus / (co.parallel.tp * co.parallel.cp * co.pp);
  std::cout << "memo plan: " << o.model << " (" << ParamLayout(config).count() / 1e9
            << "B parameters, " << config.num_hidden_layers << " layers, hidden "
            << config.hidden_size << config.window_summary() << "), seq " << o.seq << " x batch "
            << co.batch << " per rank\n"
            << "  " << co.gpus << " x " << co.gpu.name << " (" << gib(double(co.gpu.memory_bytes))
            << "): TP " << co.parallel.tp << " with sequence parallelism, CP " << co.parallel.cp
            << (co.pp > 1 ? str(", PP ", co.pp,
                                co.virtual_stages > 1
                                    ? str(" x ", co.virtual_stages, " virtual (interleaved 1F1B)")
                                    : std::string(" (1F1B)"),
                                ", ", co.micro_batches, " micro-batches per step")
                          : std::string())
            << ", DP " << dp << "; ZeRO " << co.zero << "; bf16 mixed precision\n"
            << "  host " << gib(double(co.host_memory_bytes)) << " per node of "
            << std::min(co.gpus, co.gpus_per_node) << " GPUs, host link "
            << (co.host_bandwidth_bytes_per_s > 0 ? co.host_bandwidth_bytes_per_s
                                                  : co.gpu.host_link_bytes_per_s) /
                   1e9
            << " GB/s per GPU; compute at " << pct(co.efficiency) << " of "
            << co.gpu.peak_bf16_flops / 1e12 << " TFLOP/s\n\n";
  auto g = [](int64_t b) { return gib(double(b)); };
  row("strategy", plans, [](const ClusterPlan& p) { return p.strategy; });
  row("fits", plans, [](const ClusterPlan& p) {
    return p.fits() ? std::string("yes") : std::string(p.device_fits ? "no (host)" : "no (device)");
  });
  if (co.pp > 1) {
    row("fullest stage", plans, [](const ClusterPlan& p) { return std::to_string(p.pp_stage); });
    row("  its layers", plans,
        [](const ClusterPlan& p) { return std::to_string(p.pp_stage_layers); });
    row("  in flight", plans, [](const ClusterPlan& p) { return std::to_string(p.pp_in_flight); });
  }
  std::cout << "per GPU device memory" << (co.pp > 1 ? " (the fullest stage)" : "") << "\n";
  row("  weights (bf16)", plans, [&](const ClusterPlan& p) { return g(p.device.weight_bytes); });
  row("  gradients (fp32)", plans,
      [&](const ClusterPlan& p) { return g(p.device.gradient_bytes); });
  row("  optimizer state", plans,
      [&](const ClusterPlan& p) { return g(p.device.optimizer_bytes); });
  row("  activation arena", plans,
      [&](const ClusterPlan& p) { return g(p.device.activation_bytes); });
  row("  rounding buffers", plans,
      [&](const ClusterPlan& p) { return g(p.device.rounding_bytes); });
  row("  workspace", plans, [&](const ClusterPlan& p) { return g(p.device.workspace_bytes); });
  row("  total", plans, [&](const ClusterPlan& p) { return g(p.device.total()); });
  row("alpha", plans, [](const ClusterPlan& p) {
    if (!p.alpha) return std::string("-");
    char b[48];
    if (p.alpha_bound.empty())  // no host memory to choose it within
      std::snprintf(b, sizeof b, "%.3f", *p.alpha);
    else
      std::snprintf(b, sizeof b, "%.3f (%s)", *p.alpha, p.alpha_bound.c_str());
    return std::string(b);
  });
  row("host memory per node", plans, [&](const ClusterPlan& p) { return g(p.host_need_bytes); });
  std::cout << "step time\n";
  row("  forward", plans, [](const ClusterPlan& p) { return secs(p.time.forward_s); });
  row("  backward", plans, [](const ClusterPlan& p) { return secs(p.time.backward_s); });
  row("  recompute", plans, [](const ClusterPlan& p) { return secs(p.time.recompute_s); });
  row("  TP communication", plans, [](const ClusterPlan& p) { return secs(p.time.tp_comm_s); });
  row("  CP (not hidden)", plans, [](const ClusterPlan& p) { return secs(p.time.cp_comm_s); });
  if (plans.front().cp_bytes_per_micro_batch > 0)
    row("  CP ring sends (traced)", plans,
        [&](const ClusterPlan& p) { return g(p.cp_bytes_per_micro_batch); });
  if (plans.front().tp_bytes_per_micro_batch > 0)
    row("  TP collective sends (traced)", plans,
        [&](const ClusterPlan& p) { return g(p.tp_bytes_per_micro_batch); });
  row("  copy stalls", plans, [](const ClusterPlan& p) { return secs(p.time.copy_stall_s); });
  if (co.pp > 1) {
    row("  pipeline bubble", plans, [](const ClusterPlan& p) { return secs(p.time.bubble_s); });
    row("  stage transfers (fill)", plans,
        [](const ClusterPlan& p) { return secs(p.time.pp_comm_s); });
  }
  row("  total", plans, [](const ClusterPlan& p) { return secs(p.time.step_s); });
  row("tokens/s (cluster)", plans, [](const ClusterPlan& p) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", p.tokens_per_s);
    return std::string(b);
  });
  row("MFU, causal", plans, [](const ClusterPlan& p) { return pct(p.mfu_causal); });
  row("MFU, non-causal", plans, [](const ClusterPlan& p) { return pct(p.mfu_noncausal); });
  row("longest seq that fits", plans, [](const ClusterPlan& p) {
    return p.max_seq ? std::to_string(*p.max_seq) : std::string("none");
  });
  row("planning time", plans, [](const ClusterPlan& p) { return secs(p.planning_seconds); });
  if (co.pp > 1) {
    std::cout << "pipeline: bubble (p - 1) / (v m) = " << pct(plans.front().pp_bubble)
              << "; a stage boundary passes " << gib(double(plans.front().pp_bytes_per_micro_batch))
              << " per micro-batch each way; each stage's device need per GPU:\n";
    for (const ClusterPlan& p : plans) {
      std::cout << "  " << p.strategy << ":";
      for (int64_t b : p.pp_stage_totals) std::cout << " " << gib(double(b));
      std::cout << "\n";
    }
  }
  for (const ClusterPlan& p : plans)
    if (!p.fits()) std::cout << p.strategy << " does not fit: " << p.why_not << "\n";
  // the search's unit: 1024 t c tokens, or the layout's own where nothing that long fits
  std::set<int64_t> units;
  for (const ClusterPlan& p : plans) units.insert(p.max_seq_step);
  std::string steps;
  for (auto u = units.rbegin(); u != units.rend(); ++u)
    steps += str(steps.empty() ? "" : " or ", *u);
  std::cout << "\n"
            << cluster_formulas() << "longest seq: bisection over multiples of " << steps
            << " tokens, each a shape-only trace and plan"
            << (co.pp > 1 ? " (each stage's whole step, traced)" : "") << "\n";
}

// `memo plan --gpus G --layouts` (Note [Layout comparison] in train/cluster_plan.h): one line a
// layout, fastest first, with the fastest strategy that fits it.
void run_layout_plan(const PlanCommandOptions& o, const ModelConfig& config,
                     const ClusterOptions& co, const std::vector<std::string>& strategies) {
  if (o.tp != 1 || o.cp != 1 || o.pp != 1 || o.virtual_stages != 1 || o.micro_batches != 0)
    throw ConfigError(
        "--layouts plans every --tp, --cp and --pp of --gpus; leave those flags (and "
        "--virtual-stages, --micro-batches) out");
  int refused = 0;
  const std::vector<LayoutPlan> layouts =
      plan_layouts(cpu_backend(), config, o.seq, strategies, co, &refused);
  if (o.json) {
    nlohmann::json all = {{"model", o.model},
                          {"gpus", co.gpus},
                          {"gpus_per_node", co.gpus_per_node},
                          {"gpu", co.gpu.name},
                          {"seq", o.seq},
                          {"refused_layouts", refused},
                          {"layouts", nlohmann::json::array()}};
    for (const LayoutPlan& l : layouts) {
      nlohmann::json j = {{"tp", l.tp},
                          {"cp", l.cp},
                          {"pp", l.pp},
                          {"virtual_stages", l.virtual_stages},
                          {"dp", l.dp},
                          {"best", l.best >= 0 ? nlohmann::json(l.plans[size_t(l.best)].strategy)
                                               : nlohmann::json()},
                          {"strategies", nlohmann::json::array()}};
      for (const ClusterPlan& p : l.plans) j["strategies"].push_back(cluster_json(p));
      all["layouts"].push_back(j);
    }
    std::cout << all.dump(2) << "\n";
    return;
  }
  std::cout << "memo plan: " << o.model << " at seq " << o.seq << ", batch " << co.batch
            << " per micro-batch, on " << co.gpus << " x " << co.gpu.name << " ("
            << co.gpus_per_node << " per node), host memory " << gib(double(co.host_memory_bytes))
            << " per node: every layout, fastest first (tensor parallelism within a node; a "
               "pipeline runs 4 x pp micro-batches a step by 1F1B, or by interleaved 1F1B over "
               "two chunks a rank: pp 4x2)\n";
  std::cout << "  tp  cp   pp  dp  fastest that fits   tokens/s  MFU causal  GiB per GPU  "
               "host GiB per node  bubble\n";
  char line[256];
  auto pp = [](const LayoutPlan& l) {
    return l.virtual_stages > 1 ? str(l.pp, "x", l.virtual_stages) : str(l.pp);
  };
  for (const LayoutPlan& l : layouts) {
    if (l.best < 0) continue;
    const ClusterPlan& p = l.plans[size_t(l.best)];
    std::snprintf(
        line, sizeof(line), "%4lld%4lld%5s%4lld  %-17s %10.0f %10.1f%% %12.2f %18.2f %6.1f%%\n",
        (long long)l.tp, (long long)l.cp, pp(l).c_str(), (long long)l.dp, p.strategy.c_str(),
        p.tokens_per_s, 100.0 * p.mfu_causal, double(p.device.total()) / double(int64_t(1) << 30),
        double(p.host_need_bytes) / double(int64_t(1) << 30), 100.0 * p.pp_bubble);
    std::cout << line;
  }
  bool unfit = false;
  for (const LayoutPlan& l : layouts) {
    if (l.best >= 0) continue;
    unfit = true;
    // the strategy closest to fitting: least short of device memory, then of host memory
    auto short_of = [](const ClusterPlan& p) {
      return std::pair{std::max<int64_t>(0, p.device.total() - p.device_capacity_bytes),
                       std::max<int64_t>(0, p.host_need_bytes - p.host_capacity_bytes)};
    };
    const ClusterPlan* closest = &l.plans.front();
    for (const ClusterPlan& p : l.plans)
      if (short_of(p) < short_of(*closest)) closest = &p;
    std::snprintf(line, sizeof(line), "%4lld%4lld%5s%4lld  %-17s %10s %11s %12.2f %18.2f %6.1f%%\n",
                  (long long)l.tp, (long long)l.cp, pp(l).c_str(), (long long)l.dp,
                  ("none (" + closest->strategy + ")").c_str(), "-", "-",
                  double(closest->device.total()) / double(int64_t(1) << 30),
                  double(closest->host_need_bytes) / double(int64_t(1) << 30),
                  100.0 * closest->pp_bubble);
    std::cout << line;
  }
  if (unfit)
    std::cout << "none (S): no strategy fits; S is the closest (least short of device memory, then "
                 "of host memory), its needs shown; --json has each strategy's reasons\n";
  if (refused > 0)
    std::cout << refused << " more layouts left out: their --tp does not divide the heads or "
              << "the MLP, the sequence does not split into 2 x tp x cp chunks, or there are "
              << "more chunks than layers\n";
}

void run_cluster_plan(const PlanCommandOptions& o) {
  if (o.model.empty())
    throw ConfigError("--gpus and --gpu plan a model given by --model (a preset or a config.json)");
  if (o.gpu.empty())
    throw ConfigError(str("--model plans for a GPU given by --gpu: one of ",
                          join(shipped_gpu_names(o.hardware_dir), ", "),
                          ", or a path to a JSON file like them"));
  if (o.compare && o.activations_given)
    throw ConfigError("--compare prints every strategy; leave out --activations");
  check_micro_batch_tokens(o.batch, o.seq, "plans");
  const ModelConfig config = resolve_model(o.model);
  ClusterOptions co;
  co.gpu = find_gpu(o.gpu, o.hardware_dir);
  co.gpus = o.gpus > 0 ? o.gpus : o.tp * o.cp * o.pp;
  co.gpus_per_node = o.gpus_per_node;
  co.parallel = Parallel{o.tp, o.cp};
  co.pp = o.pp;
  co.virtual_stages = o.virtual_stages;
  co.micro_batches = o.micro_batches > 0 ? o.micro_batches : o.pp > 1 ? 4 * o.pp : 1;
  co.pp_layers = o.pp_layers;
  co.batch = o.batch;
  co.host_memory_bytes = parse_bytes(o.host_memory, "--host-memory");
  co.host_bandwidth_bytes_per_s = o.host_bandwidth_gb * 1e9;
  co.network_bytes_per_s = o.network_gb * 1e9;
  co.efficiency = o.efficiency;
  co.zero = o.zero;
  co.workspace_bytes = parse_bytes(o.workspace, "--workspace");
  co.alpha = o.alpha;
  std::vector<std::string> strategies;
  if (o.activations_given)
    strategies = {o.activations};
  else
    strategies.assign(std::begin(kStrategyNames), std::end(kStrategyNames));
  if (o.layouts) {
    run_layout_plan(o, config, co, strategies);
    return;
  }
  std::vector<ClusterPlan> plans;
  for (const std::string& s : strategies)
    plans.push_back(plan_cluster(cpu_backend(), config, o.seq, s, co));
  if (o.json) {
    if (plans.size() == 1) {
      std::cout << cluster_json(plans.front()).dump(2) << "\n";
    } else {
      nlohmann::json all = {{"model", o.model},
                            {"gpus", co.gpus},
                            {"gpu", co.gpu.name},
                            {"tp", co.parallel.tp},
                            {"cp", co.parallel.cp},
                            {"pp", co.pp},
                            {"virtual_stages", co.virtual_stages},
                            {"micro_batches", co.micro_batches},
                            {"seq", o.seq},
                            {"strategies", nlohmann::json::array()}};
      for (const ClusterPlan& p : plans) all["strategies"].push_back(cluster_json(p));
      std::cout << all.dump(2) << "\n";
    }
  } else {
    print_cluster(plans, config, co, o);
  }
}

// The flags of a plan of a run on this machine (--config), but --device and --precision; returns
// --optimizer, which the cluster mode rejects.
CLI::Option* add_run_flags(CLI::App* cmd, const std::shared_ptr<PlanCommandOptions>& o) {
  cmd->add_option("--config", o->config_path,
                  "Model config.json, or a model or run folder (a run on this machine)");
  for (const CLI::Option* flag : add_position_flags(*cmd, o->positions, "With --config: plan with"))
    o->config_only.push_back(flag);
  cmd->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences per micro-batch")->capture_default_str();
  cmd->add_option("--activations", o->activations,
                  "Activation strategy: keep, recompute, offload, memo (default: keep; with "
                  "--gpus: all of them)")
      ->each([o](const std::string&) { o->activations_given = true; });
  CLI::Option* optimizer_flag =
      cmd->add_option("--optimizer", o->optimizer,
                      "Optimiser whose state the device need counts (--config plans; default "
                      "hyperparameters)")
          ->capture_default_str();
  std::vector<const CLI::Option*>& only = o->config_only;
  only.push_back(cmd->add_option(
      "--device-memory", o->device_memory,
      "With --config: the device memory budget, e.g. 1.5GiB (default: none; with --gpus the "
      "GPU's)"));
  only.push_back(
      cmd->add_option("--solver", o->solver,
                      "With --config: the planner, heuristic or mip (CBC after the heuristics)")
          ->capture_default_str());
  only.push_back(cmd->add_option("--mip-seconds", o->mip_seconds,
                                 "With --config: CBC's time limit per level in seconds")
                     ->check(number_check(true))
                     ->capture_default_str());
  cmd->add_flag("--json", o->json, "Print one JSON object");
  only.push_back(cmd->add_option("--timeline", o->timeline_path,
                                 "With --config: write device bytes over one step as an SVG"));
  return optimizer_flag;
}

// Hardware we do not have: the model, the GPUs and the layout of the run.
void add_cluster_layout_flags(CLI::App* cmd, PlanCommandOptions& o) {
  cmd->add_option(
      "--model", o.model,
      "Model to plan on --gpus: 7b, 13b, 30b, 65b (the MEMO paper's GPT sizes), llama-7b .. "
      "llama-65b, or a config.json");
  cmd->add_option("--gpus", o.gpus, "GPUs of the run (default: --tp x --cp x --pp)")
      ->check(number_check(true));
  cmd->add_option("--gpu", o.gpu,
                  "GPU kind: a name shipped in hardware/ (a800-80gb, a100-80gb, "
                  "h100-sxm, h200) or a path to a JSON file like them");
  o.cluster_only.push_back(
      cmd->add_option("--hardware-dir", o.hardware_dir, "Where the shipped GPU files are")
          ->capture_default_str());
  o.cluster_only.push_back(
      cmd->add_option("--gpus-per-node", o.gpus_per_node, "GPUs sharing one host's memory")
          ->capture_default_str());
  cmd->add_option("--tp", o.tp, "Tensor parallel ranks (with sequence parallelism)")
      ->capture_default_str();
  cmd->add_option("--cp", o.cp, "Context parallel ranks")->capture_default_str();
  cmd->add_option("--pp", o.pp, "Pipeline stages (1F1B; the outermost split of the GPUs)")
      ->check(number_check(true))
      ->capture_default_str();
  cmd->add_option("--virtual-stages", o.virtual_stages,
                  "Chunks per pipeline stage (interleaved 1F1B)")
      ->check(number_check(true))
      ->capture_default_str();
  cmd->add_option("--pp-layers", o.pp_layers,
                  "Layers of each pipeline chunk, in order (as memo train's; default: balanced)");
  cmd->add_option("--micro-batches", o.micro_batches,
                  "Micro-batches per step and pipeline (default: 1, or 4 x --pp with a pipeline)")
      ->check(number_check(true));
}

// --device and --precision of a --config plan.
void add_device_flags(CLI::App* cmd, PlanCommandOptions& o) {
  cmd->add_option("--device", o.device,
                  "With --config: the backend of the run, cpu or cuda (its attention scratch, "
                  "256-row panels, cuBLASLt workspace and native bf16 kernels, planned here "
                  "without a GPU; the fused bf16 attention where it applies, else the chunked one)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  o.config_only.push_back(
      cmd->add_option("--precision", o.precision,
                      "With --config: the run's precision (bf16: bf16 activations and working "
                      "weights, as memo train --precision bf16). Default: as memo train's, bf16 "
                      "with --device cuda, else fp32; --gpus plans bf16 mixed precision")
          ->check(CLI::IsMember({"fp32", "bf16"})));
}

// Hardware we do not have: host memory, links, efficiency and memo's alpha.
void add_cluster_cost_flags(CLI::App* cmd, PlanCommandOptions& o) {
  cmd->add_option("--host-memory", o.host_memory,
                  "Host memory for offloaded activations, e.g. 2TiB: with --gpus per node (0: "
                  "none, so offload and memo are refused); with --config per process, as memo "
                  "train's (0: unlimited)")
      ->capture_default_str();
  std::vector<const CLI::Option*>& only = o.cluster_only;
  only.push_back(cmd->add_option(
      "--host-bandwidth", o.host_bandwidth_gb,
      "Host link GB/s per GPU and direction, all GPUs copying (default: the GPU file's)"));
  only.push_back(
      cmd->add_option(
             "--network-bandwidth", o.network_gb,
             "Between nodes, GB/s per GPU and direction (for TP or CP groups wider than a node)")
          ->capture_default_str());
  only.push_back(
      cmd->add_option("--efficiency", o.efficiency, "Achieved fraction of peak FLOP/s in compute")
          ->capture_default_str());
  only.push_back(cmd->add_option("--zero", o.zero, "ZeRO stage over the data-parallel ranks (0-3)")
                     ->capture_default_str());
  only.push_back(cmd->add_option("--workspace", o.workspace,
                                 "Per-GPU memory outside memo's plan (CUDA context, cuBLAS, NCCL)")
                     ->capture_default_str());
  cmd->add_option("--alpha", o.alpha,
                  "memo: a fixed alpha instead of the cost model's (with --config: as memo "
                  "train's --alpha)");
  only.push_back(cmd->add_flag("--compare", o.compare,
                               "Every strategy side by side (the default with --gpus)"));
  cmd->add_flag("--layouts", o.layouts,
                "Every --tp x --cp x --pp layout of --gpus (the rest data parallel), fastest "
                "first, each with the fastest strategy that fits (or --activations')");
}

// The cluster mode when any of --model, --gpus, --gpu is given, after rejecting the flags of the
// other mode; else a plan on this machine.
void run_plan_command(const PlanCommandOptions& o, const CLI::Option* optimizer_flag) {
  const bool cluster = !o.model.empty() || o.gpus > 0 || !o.gpu.empty();
  if (!o.pp_layers.empty() && (o.pp == 1 || o.layouts))
    throw ConfigError(o.layouts ? "--pp-layers splits the pipeline of one layout: drop --layouts"
                                : "--pp-layers splits a pipeline: give --pp 2 or more");
  if (!cluster) {
    if (o.layouts)
      throw ConfigError("--layouts compares the layouts of --gpus on --gpu; give both");
    if (o.config_path.empty())
      throw ConfigError(
          "memo plan needs --config (this machine) or --model with --gpus and --gpu (a cluster)");
    for (const CLI::Option* flag : o.cluster_only)
      if (flag->count() > 0)
        throw ConfigError(str(flag->get_name(),
                              " applies to plans on hardware we do not have (--model with --gpus "
                              "and --gpu); a --config plan is of a run on this machine"));
    if (o.pp > 1) {
      if (!o.timeline_path.empty())
        throw ConfigError("--timeline draws one process's plan: drop --pp");
      if (host_budget(o) > 0)
        throw ConfigError(
            "--host-memory with --pp: memo plan --config does not size a pipeline's host memory "
            "(memo train --pp checks each stage's before step 1); drop one of them");
      run_pipeline_plan(o);
      return;
    }
    if (o.virtual_stages != 1 || o.micro_batches != 0)
      throw ConfigError(
          "--virtual-stages and --micro-batches plan a pipeline: give --pp 2 or more");
    run_plan(o);
    return;
  }
  if (!o.config_path.empty())
    throw ConfigError(
        "--config plans a run on this machine; with --gpus/--gpu/--model give the model as "
        "--model");
  if (o.device != "cpu")
    throw ConfigError(
        "--device applies to --config plans (a memo train run); --gpus plans size the "
        "activations as a fused attention would");
  if (optimizer_flag->count() > 0)
    throw ConfigError(
        "--optimizer applies to --config plans; --gpus plans count Adam's "
        "mixed-precision state (fp32 master weights and two moments)");
  for (const CLI::Option* flag : o.config_only)
    if (flag->count() > 0)
      throw ConfigError(str(flag->get_name(),
                            " applies to --config plans (a run on this machine); plans on --gpus "
                            "do not read it"));
  run_cluster_plan(o);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCommandOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan a run's device memory without training");
  CLI::Option* optimizer_flag = add_run_flags(cmd, o);
  add_cluster_layout_flags(cmd, *o);
  add_device_flags(cmd, *o);
  add_cluster_cost_flags(cmd, *o);
  cmd->callback([o, optimizer_flag] { run_plan_command(*o, optimizer_flag); });
}

}  // namespace memo::cli
