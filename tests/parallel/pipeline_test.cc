// Pipeline parallelism's layout and schedules (parallel/pipeline.h): the layer split, 1F1B and
// interleaved 1F1B run every micro-batch's forward and backward once on each chunk, never
// deadlock, hold the activations Note [Pipeline schedules] says, and their simulated bubble is
// (P - 1) / (V m); a send is known complete only where the schedule proves its peer received it;
// a schedule that cannot run is named.
#include "memo/parallel/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

std::vector<std::vector<PipeAction>> all_ranks(PipelineShape shape, int m) {
  std::vector<std::vector<PipeAction>> lists;
  for (int r = 0; r < shape.stages; ++r) lists.push_back(pipeline_actions(shape, m, r));
  return lists;
}

TEST(Pipeline, layers_split_to_the_cheapest_bottleneck_then_evenly_then_light_first) {
  EXPECT_EQ(balance_layers(32, 4, 0.0), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(balance_layers(30, 4, 0.0), (std::vector<int>{7, 7, 8, 8}));
  // the head costs 2.5 layers: the bottleneck is 9 (8.625 average), the last chunk 6 + 2.5
  EXPECT_EQ(balance_layers(32, 4, 2.5), (std::vector<int>{8, 9, 9, 6}));
  EXPECT_EQ(balance_layers(4, 4, 10.0), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(balance_layers(7, 1, 3.0), (std::vector<int>{7}));
  EXPECT_EQ(chunk_first_layers({7, 7, 8, 8}), (std::vector<int>{0, 7, 14, 22, 30}));
  EXPECT_NE(test::error_message<ConfigError>([] {
              balance_layers(3, 4, 0.0);
            }).find("3 layers do not fill 4 chunks"),
            std::string::npos);
}

TEST(Pipeline, explicit_layer_counts_are_checked_by_name) {
  EXPECT_EQ(parse_pipeline_layers("9,8,8,7", 32, 4), (std::vector<int>{9, 8, 8, 7}));
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"9,8,8", "3 counts for 4 chunks"},
           {"9,8,8,8", "add up to 33, the model has 32 layers"},
           {"9,8,0,15", "'0' is not a positive layer count"},
           {"9,8,x,7", "'x' is not a positive layer count"},
           {"9,8,,7", "'' is not a positive layer count"},
           {"9,8,8,7 ", "'7 ' is not a positive layer count"},
           // counts that would wrap round an int to the right sum
           {"2147483647,2147483647,5,1", "2147483647 layers in one chunk, the model has 32"}})
    EXPECT_NE(
        test::error_message<ConfigError>([&] { parse_pipeline_layers(text, 32, 4); }).find(says),
        std::string::npos)
        << text;
  // shapes whose chunk or schedule counts would overflow are refused before they are counted
  EXPECT_NE(test::error_message<ConfigError>([] {
              validate_pipeline(2, int64_t(1) << 30, 4);
            }).find("chunks: more than 65536"),
            std::string::npos);
  for (const auto& [v, m] : {std::pair<int64_t, int64_t>{1, 2147483647},
                             {4, (int64_t(1) << 62) + 2}})  // 4 m wraps round to 8
    EXPECT_NE(test::error_message<ConfigError>([&] {
                validate_pipeline(2, v, m);
              }).find("a schedule runs"),
              std::string::npos)
        << m;
}

TEST(Pipeline, one_f_one_b_warms_up_then_alternates_then_cools_down) {
  const PipelineShape shape{4, 1};
  using enum PipeOp;
  // rank 1 of 4, 5 micro-batches: 2 warm-up forwards, 3 pairs, 2 cool-down backwards
  EXPECT_EQ(pipeline_actions(shape, 5, 1), (std::vector<PipeAction>{{kForward, 0, 1},
                                                                    {kForward, 1, 1},
                                                                    {kForward, 2, 1},
                                                                    {kBackward, 0, 1},
                                                                    {kForward, 3, 1},
                                                                    {kBackward, 1, 1},
                                                                    {kForward, 4, 1},
                                                                    {kBackward, 2, 1},
                                                                    {kBackward, 3, 1},
                                                                    {kBackward, 4, 1}}));
  for (int m : {1, 2, 3, 4, 8})
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(warmup_forwards(shape, m, r), std::min(3 - r, m));
      EXPECT_EQ(peak_in_flight(pipeline_actions(shape, m, r)), std::min(4 - r, m)) << m << r;
    }
}

TEST(Pipeline, interleaving_visits_the_chunks_in_groups_of_p_micro_batches) {
  const PipelineShape shape{2, 2};  // chunks 0, 2 on rank 0; 1, 3 on rank 1
  using enum PipeOp;
  // rank 1, 4 micro-batches: warm-up 2 (P - r - 1) + (V - 1) P = 2 forwards
  const std::vector<PipeAction> a = pipeline_actions(shape, 4, 1);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(std::vector<PipeAction>(a.begin(), a.begin() + 6),
            (std::vector<PipeAction>{{kForward, 0, 1},
                                     {kForward, 1, 1},
                                     {kForward, 0, 3},
                                     {kBackward, 0, 3},
                                     {kForward, 1, 3},
                                     {kBackward, 1, 3}}));
  EXPECT_EQ(warmup_forwards(shape, 4, 0), 4);
  EXPECT_EQ(warmup_forwards({4, 2}, 8, 0), 10);  // 2 x 3 + 1 x 4
  EXPECT_EQ(warmup_forwards({4, 2}, 4, 0), 8);   // capped at m V
  EXPECT_EQ(warmup_forwards({4, 3}, 8, 2), 10);  // 2 x 1 + 2 x 4
  EXPECT_EQ(peak_in_flight(pipeline_actions({4, 2}, 8, 0)), 11);
  EXPECT_EQ(peak_in_flight(pipeline_actions({4, 2}, 8, 3)), 5);
}

// Every shape the tests of issue #26 run, and larger ones: each (micro-batch, chunk) forward and
// backward once on its rank (simulate_pipeline checks it), no deadlock, and with equal chunks the
// bubble of the formula, exactly up to rounding of the sums.
TEST(Pipeline, simulated_bubbles_equal_the_formula_and_no_schedule_deadlocks) {
  for (const PipelineShape shape :
       {PipelineShape{1, 1}, PipelineShape{2, 1}, PipelineShape{4, 1}, PipelineShape{8, 1},
        PipelineShape{2, 2}, PipelineShape{4, 2}, PipelineShape{4, 3}, PipelineShape{8, 4}})
    for (int m : {1, 2, 3, 4, 8, 12, 16, 32}) {
      if (shape.virtual_stages > 1 && m % shape.stages != 0) continue;
      SCOPED_TRACE(testing::Message()
                   << "P " << shape.stages << " V " << shape.virtual_stages << " m " << m);
      const auto lists = all_ranks(shape, m);
      // a chunk's forward 1 / V of a stage's, its backward twice that
      const double f = 1.0 / shape.virtual_stages;
      const PipeSimulation sim =
          simulate_pipeline(shape, m, lists, PipeTimes::uniform(shape, f, 2.0 * f));
      for (double busy : sim.busy_s) EXPECT_NEAR(busy, 3.0 * m, 1e-9);
      if (shape.virtual_stages == 1 || m > shape.stages)
        EXPECT_NEAR(sim.bubble(), pipeline_bubble(shape, m), 1e-9);
      else  // m = P: every forward first, a longer cool-down than the steady state hides
        EXPECT_GE(sim.bubble(), pipeline_bubble(shape, m) - 1e-9);
    }
}

// The step as the longest path through the actions' dependencies (each rank's order, each
// input, a transfer where it crosses ranks), by relaxing every action's end until none moves: an
// oracle that shares no code with simulate_pipeline's sweep.
double longest_path(PipelineShape shape, const std::vector<std::vector<PipeAction>>& lists,
                    const PipeTimes& t) {
  std::map<std::tuple<int, int, int>, double> end;  // (op, micro-batch, chunk) -> end
  auto at = [&](PipeOp op, int mb, int chunk) { return end[{int(op), mb, chunk}]; };
  double step = 0.0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < shape.stages; ++r)
      for (size_t i = 0; i < lists[size_t(r)].size(); ++i) {
        const PipeAction& a = lists[size_t(r)][i];
        const bool fwd = a.op == PipeOp::kForward;
        double start = 0.0;
        if (i > 0) {
          const PipeAction& p = lists[size_t(r)][i - 1];
          start = at(p.op, p.micro_batch, p.chunk);
        }
        const int from = fwd ? a.chunk - 1 : a.chunk + 1;
        const double cross = shape.rank_of(std::max(from, 0)) != r ? t.transfer_s : 0.0;
        if (fwd && a.chunk > 0) start = std::max(start, at(a.op, a.micro_batch, from) + cross);
        if (!fwd && from < shape.chunks())
          start = std::max(start, at(a.op, a.micro_batch, from) + cross);
        if (!fwd) start = std::max(start, at(PipeOp::kForward, a.micro_batch, a.chunk));
        const double e =
            start + (fwd ? t.forward_s[size_t(a.chunk)] : t.backward_s[size_t(a.chunk)]);
        if (e > at(a.op, a.micro_batch, a.chunk) + 1e-12) {
          end[{int(a.op), a.micro_batch, a.chunk}] = e;
          moved = true;
        }
        step = std::max(step, e);
      }
  }
  return step;
}

TEST(Pipeline, transfers_lengthen_the_step_along_its_longest_path) {
  for (const PipelineShape shape : {PipelineShape{4, 1}, PipelineShape{4, 2}, PipelineShape{3, 3}})
    for (int m : {3, 8, 12}) {
      if (shape.virtual_stages > 1 && m % shape.stages != 0) continue;
      SCOPED_TRACE(testing::Message()
                   << "P " << shape.stages << " V " << shape.virtual_stages << " m " << m);
      const auto lists = all_ranks(shape, m);
      PipeTimes t = PipeTimes::uniform(shape, 1.0, 2.0, 0.25);
      t.forward_s.back() = 1.5;  // the head's chunk is the slowest
      t.backward_s.back() = 3.0;
      const double step = simulate_pipeline(shape, m, lists, t).step_s;
      EXPECT_NEAR(step, longest_path(shape, lists, t), 1e-9);
      t.transfer_s = 0.0;
      // at least each chunk boundary crossed twice more (forward and back) on the critical path
      EXPECT_GE(step, simulate_pipeline(shape, m, lists, t).step_s +
                          2 * (shape.chunks() - 1) * 0.25 - 1e-9);
    }
}

// Note [Pipeline send completion] on 1F1B over 2 ranks, 4 micro-batches, worked by hand: rank
// 0 runs F0 F1 B0 F2 B1 F3 B2 B3 and rank 1 F0 B0 F1 B1 F2 B2 F3 B3 (its backwards run with its
// forwards, so they neither receive nor send). Rank 0's B_k receives the gradient rank 1 sent in
// its F_k, after receiving rank 0's F_k: rank 0's send of F_k is vouched for there. Rank 1's
// F_k receives what rank 0 sent in its F_k, after rank 0's B_(k-2) received rank 1's gradient
// of k - 2; the last two gradients complete with the step.
TEST(Pipeline, a_send_completes_where_the_schedule_proves_its_peer_received_it) {
  const PipelineShape shape{2, 1};
  using Lists = std::vector<std::vector<int>>;
  EXPECT_EQ(sends_completed(shape, 4, 0), (Lists{{}, {}, {0}, {}, {1}, {}, {3}, {5}}));
  EXPECT_EQ(sends_completed(shape, 4, 1), (Lists{{}, {}, {}, {}, {0}, {}, {2}, {}}));
}

// Every release is sound on every shape: with vector clocks over the ranks' actions (an action
// receives, then sends), the peer's receive of each released send happens before the receive
// that releases it. And no send is released twice.
TEST(Pipeline, every_released_send_was_received_first) {
  for (const auto& [shape, m] : std::vector<std::pair<PipelineShape, int>>{{{2, 1}, 1},
                                                                           {{2, 1}, 8},
                                                                           {{4, 1}, 3},
                                                                           {{4, 1}, 8},
                                                                           {{2, 2}, 4},
                                                                           {{4, 2}, 8},
                                                                           {{3, 3}, 6}}) {
    SCOPED_TRACE(testing::Message()
                 << "P " << shape.stages << " V " << shape.virtual_stages << " m " << m);
    const int P = shape.stages;
    const auto lists = all_ranks(shape, m);
    // clock[q] = k: rank q's actions below k (their receives and sends) happened before
    std::vector<std::vector<int>> clock(size_t(P), std::vector<int>(size_t(P), 0));
    std::vector<std::vector<std::vector<int>>> at_receive(
        static_cast<size_t>(P));                           // per rank and action
    std::map<std::pair<int, int>, std::vector<int>> sent;  // (micro-batch, tag)
    std::map<std::pair<int, int>, int> received_at;        // ... -> action index
    std::vector<size_t> next(size_t(P), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < P; ++r)
        for (auto& i = next[size_t(r)]; i < lists[size_t(r)].size(); ++i) {
          std::vector<int>& c = clock[size_t(r)];
          const PipeMessage in = action_receive(shape, lists[size_t(r)][i]);
          if (in.peer >= 0) {
            const auto it = sent.find({in.micro_batch, in.tag});
            if (it == sent.end()) break;  // waits for its sender
            for (int q = 0; q < P; ++q)
              c[size_t(q)] = std::max(c[size_t(q)], it->second[size_t(q)]);
            received_at[{in.micro_batch, in.tag}] = int(i);
          }
          c[size_t(r)] = int(i) + 1;
          at_receive[size_t(r)].push_back(c);
          const PipeMessage out = action_send(shape, lists[size_t(r)][i]);
          if (out.peer >= 0) sent[{out.micro_batch, out.tag}] = c;
          moved = true;
        }
    }
    for (int r = 0; r < P; ++r) {
      ASSERT_EQ(next[size_t(r)], lists[size_t(r)].size()) << "rank " << r;
      const auto completed = sends_completed(shape, m, r);
      ASSERT_EQ(completed.size(), lists[size_t(r)].size());
      std::vector<int> released;
      for (size_t i = 0; i < completed.size(); ++i)
        for (int j : completed[i]) {
          ASSERT_LT(size_t(j), i);
          const PipeMessage s = action_send(shape, lists[size_t(r)][size_t(j)]);
          ASSERT_GE(s.peer, 0) << "action " << j << " sends nothing";
          const int k = received_at.at({s.micro_batch, s.tag});
          EXPECT_GT(at_receive[size_t(r)][i][size_t(s.peer)], k)
              << "rank " << r << " action " << i << " releases action " << j << "'s send";
          released.push_back(j);
        }
      std::sort(released.begin(), released.end());
      EXPECT_EQ(std::adjacent_find(released.begin(), released.end()), released.end());
    }
  }
}

// Between two ranks, in each direction, the schedules receive every message in the order the
// sender sends it, the activations and the gradients alike (interleaving's wrap-around at P = 2
// sends both kinds one way): a transport without tags that keeps one pair's messages in order
// (NCCL's point-to-point) would deliver them as MPI's tags do (Note [Pipeline sends]).
TEST(Pipeline, messages_between_two_ranks_are_received_in_the_order_sent) {
  int mixed = 0;
  for (int P : {2, 3, 4})
    for (int V : {1, 2, 3})
      for (int m : {P, 2 * P, 3 * P + (V == 1 ? 1 : 0)}) {
        const PipelineShape shape{P, V};
        // (from, to) -> (tag, micro-batch) in send order, and in receive order
        std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sent, received;
        for (int r = 0; r < P; ++r)
          for (const PipeAction& a : pipeline_actions(shape, m, r)) {
            const PipeMessage in = action_receive(shape, a), out = action_send(shape, a);
            if (in.peer >= 0) received[{in.peer, r}].emplace_back(in.tag, in.micro_batch);
            if (out.peer >= 0) sent[{r, out.peer}].emplace_back(out.tag, out.micro_batch);
          }
        EXPECT_EQ(sent, received) << "P " << P << " V " << V << " m " << m;
        for (const auto& [pair, messages] : sent) {
          const auto gradient = [](const std::pair<int, int>& t) { return t.first % 2 == 1; };
          mixed += std::any_of(messages.begin(), messages.end(), gradient) &&
                   !std::all_of(messages.begin(), messages.end(), gradient);
        }
      }
  EXPECT_GT(mixed, 0);  // some pairs carry both kinds one way
}

TEST(Pipeline, a_schedule_that_cannot_run_is_named) {
  const PipelineShape shape{2, 1};
  auto lists = all_ranks(shape, 2);
  std::swap(lists[1][0], lists[1][1]);  // rank 1 runs micro-batch 0's backward before its forward
  const std::string deadlock = test::error_message<Error>(
      [&] { simulate_pipeline(shape, 2, lists, PipeTimes::uniform(shape, 1, 2)); });
  EXPECT_NE(deadlock.find("deadlocks: rank 0 waits at the backward of micro-batch 0 on chunk 0; "
                          "rank 1 waits at the backward of micro-batch 0 on chunk 1"),
            std::string::npos)
      << deadlock;
  lists = all_ranks(shape, 2);
  lists[0].pop_back();
  EXPECT_NE(test::error_message<Error>([&] {
              simulate_pipeline(shape, 2, lists, PipeTimes::uniform(shape, 1, 2));
            }).find("the backward of micro-batch 1 on chunk 0 runs 0 times"),
            std::string::npos);
  EXPECT_NE(test::error_message<ConfigError>([] {
              pipeline_actions({4, 2}, 6, 0);
            }).find("6 micro-batches per step is not a multiple of --pp 4"),
            std::string::npos);
  EXPECT_THROW(pipeline_actions({0, 1}, 4, 0), ConfigError);
}

}  // namespace
}  // namespace memo
