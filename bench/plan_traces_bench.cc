// Static plans of the model's real activation traces: for each sequence length, trace one real
// training step (forward and backward of one micro-batch, keep strategy), plan it bi-level, and
// report each level's peak, lower bound and solve time, the joined plan's gap over the step's
// live-bytes lower bound, and the PyTorch-style caching allocator's peak reserved bytes replaying
// the same requests (plan::simulate_dynamic), as a ratio to the plan: the baseline from the same
// run. Threads: OpenMP's default (the attention scratch scales with it). One repetition: the
// planners are deterministic; only times vary.
//   usage: plan_traces_bench [config=configs/small.json] [batch=1] [seqs=1024,2048,4096,8192]
//                            [solver=heuristic|mip]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "memo/cpu/cpu_backend.h"
#include "memo/io/config_json.h"
#include "memo/memory/plan/dynamic_sim.h"
#include "memo/train/device_plan.h"

namespace {

using namespace memo;
constexpr double kMiB = 1024.0 * 1024.0;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string config_path = argc > 1 ? argv[1] : "configs/small.json";
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 1;
  const std::vector<int64_t> seqs = parse_list(argc > 3 ? argv[3] : "1024,2048,4096,8192");
  ActivationPlanOptions options;
  options.solver = plan_solver_from_name(argc > 4 ? argv[4] : "heuristic");
  ModelConfig config = load_model_config(config_path);
  for (int64_t s : seqs)
    config.max_position_embeddings = std::max(config.max_position_embeddings, s);
  Model model(config, cpu_backend());
  std::printf(
      "config %s: C=%lld F=%lld L=%lld H=%lld Hkv=%lld V=%lld, batch %lld, %d threads, solver %s\n",
      config_path.c_str(), (long long)config.hidden_size, (long long)config.intermediate_size,
      (long long)config.num_hidden_layers, (long long)config.num_attention_heads,
      (long long)config.num_key_value_heads, (long long)config.vocab_size, (long long)batch,
      omp_get_max_threads(), plan_solver_name(options.solver));
  std::printf(
      "| seq | requests | trace s | L1 fwd peak / LB MiB | L1 bwd peak / LB MiB | L2 buffers | "
      "plan peak MiB | step LB MiB | gap %% | solve s L1f / L1b / L2 | dynamic reserved MiB | "
      "dynamic / plan |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t seq : seqs) {
    const auto t0 = std::chrono::steady_clock::now();
    const Trace trace = trace_model_step(model, batch, seq, keep_strategy_factory());
    const double trace_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const ActivationPlan p = plan_activations(trace, options);
    const plan::DynamicSimStats dyn = plan::simulate_dynamic(flat_problem(trace));
    std::printf(
        "| %lld | %zu | %.1f | %.3f / %.3f | %.3f / %.3f | %zu | %.3f | %.3f | %.2f | "
        "%.5f / %.5f / %.5f | %.3f | %.3f |\n",
        (long long)seq, trace.requests.size(), trace_s, double(p.forward.result.plan.peak) / kMiB,
        double(p.forward.result.lower_bound) / kMiB, double(p.backward.result.plan.peak) / kMiB,
        double(p.backward.result.lower_bound) / kMiB, p.iteration.problem.buffers.size(),
        double(p.arena_bytes) / kMiB, double(p.lower_bound_bytes) / kMiB,
        plan::gap_percent(p.arena_bytes, p.lower_bound_bytes), p.forward.result.solve_seconds,
        p.backward.result.solve_seconds, p.iteration.result.solve_seconds,
        double(dyn.peak_reserved_bytes) / kMiB,
        double(dyn.peak_reserved_bytes) / double(p.arena_bytes));
    std::fflush(stdout);
  }
  return 0;
}
