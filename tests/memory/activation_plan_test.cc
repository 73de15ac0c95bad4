// The bi-level plan of a real step: every level validated, the joined offsets checked against
// every request, layer blocks reusing one level-1 plan.
#include "memo/memory/activation_plan.h"

#include <gtest/gtest.h>

#include <climits>
#include <map>

#include "memo/cpu/cpu_backend.h"
#include "memo/memory/plan/validate.h"
#include "memory_test_util.h"

namespace memo {
namespace {

void expect_valid(const ActivationPlan& p) {
  for (const PlanLevel* level : {&p.forward, &p.backward, &p.iteration}) {
    EXPECT_NO_THROW(plan::validate(level->problem, level->result.plan)) << level->name;
    EXPECT_GE(level->result.plan.peak, level->result.lower_bound) << level->name;
  }
  EXPECT_NO_THROW(plan::validate(flat_problem(p.trace), plan::Plan{p.offsets, p.arena_bytes}));
  EXPECT_GE(p.arena_bytes, p.lower_bound_bytes);
  EXPECT_EQ(p.arena_bytes % kAlignBytes, 0);
}

TEST(ActivationPlan, every_level_and_the_joined_plan_are_valid) {
  Model model(testing::tiny_config(), cpu_backend());
  for (int64_t seq : {8, 33, 64}) {
    const ActivationPlan p = plan_activations(testing::tiny_trace(model, 2, seq));
    expect_valid(p);
    // blocks of one level-1 peak per layer pass, beside the requests made outside the passes
    const int64_t L = model.config().num_hidden_layers;
    int64_t outside = 0;
    for (const TracedRequest& r : p.trace.requests) outside += r.phase < 0;
    EXPECT_EQ(int64_t(p.iteration.problem.buffers.size()), outside + 2 * L) << "seq " << seq;
  }
}

TEST(ActivationPlan, mip_solver_gives_a_valid_plan_no_larger_than_the_heuristic) {
  Model model(testing::tiny_config(), cpu_backend());
  const Trace t = testing::tiny_trace(model, 1, 32);
  const ActivationPlan h = plan_activations(t);
  const ActivationPlan m = plan_activations(t, {PlanSolver::kMip, 5.0});
  expect_valid(m);
  EXPECT_LE(m.arena_bytes, h.arena_bytes);
}

TEST(ActivationPlan, layers_reuse_the_level_1_offsets_inside_their_blocks) {
  Model model(testing::tiny_config(), cpu_backend());
  const ActivationPlan p = plan_activations(testing::tiny_trace(model, 1, 16));
  // offset - (block's offset) is the same for a transient in every layer
  std::map<std::pair<int, std::string>, std::vector<plan::Bytes>> rel;  // (pass, name) -> per layer
  for (size_t p_i = 0; p_i < p.trace.phases.size(); ++p_i) {
    plan::Bytes base = INT64_MAX;
    for (size_t i = 0; i < p.trace.requests.size(); ++i)
      if (p.trace.requests[i].phase == int(p_i)) base = std::min(base, p.offsets[i]);
    for (size_t i = 0; i < p.trace.requests.size(); ++i)
      if (p.trace.requests[i].phase == int(p_i))
        rel[{int(p.trace.phases[p_i].pass), p.trace.requests[i].name}].push_back(p.offsets[i] -
                                                                                 base);
  }
  ASSERT_FALSE(rel.empty());
  for (const auto& [key, v] : rel)
    for (plan::Bytes x : v) EXPECT_EQ(x, v.front()) << key.second;
}

TEST(ActivationPlan, solver_names_round_trip_and_unknown_is_rejected) {
  EXPECT_EQ(plan_solver_from_name("mip"), PlanSolver::kMip);
  EXPECT_STREQ(plan_solver_name(plan_solver_from_name("heuristic")), "heuristic");
  EXPECT_THROW(plan_solver_from_name("gurobi"), ConfigError);
}

}  // namespace
}  // namespace memo
