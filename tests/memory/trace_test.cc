// The trace recorder: what one real step requests, the split into layer passes, the check that
// every layer's sub-trace is the same, and the shape-scaled trace.
#include "memo/memory/trace.h"

#include <gtest/gtest.h>

#include "memo/cpu/cpu_backend.h"
#include "memo/memory/activation_plan.h"
#include "memo/model/architecture.h"
#include "memory_test_util.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(Trace, step_has_one_forward_and_one_backward_pass_per_layer) {
  const ModelConfig c = testing::tiny_config();
  Model model(c, cpu_backend());
  const Trace t = testing::tiny_trace(model, 2, 16);
  ASSERT_EQ(t.phases.size(), size_t(2 * c.num_hidden_layers));
  int saved = 0;
  for (const TracedRequest& r : t.requests) {
    EXPECT_GT(r.end, r.begin) << r.name;
    EXPECT_EQ(r.bytes % 4, 0) << r.name;
    saved += r.kind == ActKind::kSaved;
    if (r.kind == ActKind::kSaved) {
      EXPECT_EQ(r.phase, -1) << r.name;  // skeletal: level 2
    }
  }
  EXPECT_EQ(saved, skeletal_layout(c, DType::kF32).num_fields() *
                       c.num_hidden_layers);  // keep holds every layer's set
  for (size_t p = 0; p < t.phases.size(); ++p) {
    int transients = 0;
    for (const TracedRequest& r : t.requests) transients += r.phase == int(p);
    // forward: the attention scratch; backward: 9 gradients and the attention scratch
    EXPECT_EQ(transients, t.phases[p].pass == Pass::kForward ? 1 : 10) << "phase " << p;
  }
  // the head, loss and cross-layer tensors are outside every layer pass
  for (const TracedRequest& r : t.requests)
    if (r.name == "final.hidden" || r.name == "grad.hidden" || r.name == "head.logits") {
      EXPECT_EQ(r.phase, -1) << r.name;
    }
}

TEST(Trace, every_layer_sub_trace_is_identical) {
  Model model(testing::tiny_config(), cpu_backend());
  const Trace t = testing::tiny_trace(model, 1, 24);
  EXPECT_NO_THROW(check_layers_identical(t));
  // layer problems of one pass are equal buffer for buffer
  std::vector<plan::Problem> fwd, bwd;
  for (size_t p = 0; p < t.phases.size(); ++p)
    (t.phases[p].pass == Pass::kForward ? fwd : bwd).push_back(layer_problem(t, int(p)));
  for (const auto* group : {&fwd, &bwd})
    for (const plan::Problem& q : *group) {
      ASSERT_EQ(q.buffers.size(), group->front().buffers.size());
      for (size_t i = 0; i < q.buffers.size(); ++i) {
        EXPECT_EQ(q.buffers[i].name, group->front().buffers[i].name);
        EXPECT_EQ(q.buffers[i].size, group->front().buffers[i].size);
        EXPECT_EQ(q.buffers[i].begin, group->front().buffers[i].begin);
        EXPECT_EQ(q.buffers[i].end, group->front().buffers[i].end);
      }
    }
}

TEST(Trace, differing_layer_is_reported_by_layer_pass_and_request) {
  Model model(testing::tiny_config(), cpu_backend());
  Trace t = testing::tiny_trace(model, 1, 16);
  int target = -1;
  for (size_t p = 0; p < t.phases.size(); ++p)
    if (t.phases[p].pass == Pass::kBackward && t.phases[p].layer == 1) target = int(p);
  ASSERT_GE(target, 0);
  for (TracedRequest& r : t.requests)
    if (r.phase == target && r.name == "attn.dq") r.bytes += 64;
  const std::string msg = test::error_message<Error>([&] { check_layers_identical(t); });
  EXPECT_NE(msg.find("layer 1's backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attn.dq"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  EXPECT_THROW(plan_activations(t), Error);
}

TEST(Trace, transient_outliving_its_layer_pass_is_rejected) {
  TraceRecorder rec;
  rec.mark_begin(Pass::kForward, 0);
  const Tensor a = rec.acquire("leak", {16}, ActKind::kTransient, DType::kF32);
  rec.mark_end(Pass::kForward, 0);
  const Tensor b = rec.acquire("after", {16}, ActKind::kTransient, DType::kF32);
  rec.release(a);
  rec.release(b);
  const std::string msg = test::error_message<Error>([&] { rec.finish(1, 1); });
  EXPECT_NE(msg.find("'leak'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outlives"), std::string::npos) << msg;
}

TEST(Trace, unreleased_request_is_rejected) {
  TraceRecorder rec;
  const Tensor a = rec.acquire("kept", {16}, ActKind::kTransient, DType::kF32);
  const std::string msg = test::error_message<Error>([&] { rec.finish(1, 1); });
  EXPECT_NE(msg.find("'kept'"), std::string::npos) << msg;
  rec.release(a);
}

TEST(Trace, lifetimes_count_requests) {
  // a [0,2)   b [1,2)   c [2,3): releases between two requests die at the next one
  TraceRecorder rec;
  const Tensor a = rec.acquire("a", {1}, ActKind::kTransient, DType::kF32);
  const Tensor b = rec.acquire("b", {1}, ActKind::kTransient, DType::kF32);
  rec.release(b);
  rec.release(a);
  const Tensor c = rec.acquire("c", {1}, ActKind::kTransient, DType::kF32);
  rec.release(c);
  const Trace t = rec.finish(1, 1);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].begin, 0);
  EXPECT_EQ(t.requests[0].end, 2);
  EXPECT_EQ(t.requests[1].end, 2);
  EXPECT_EQ(t.requests[2].begin, 2);
  EXPECT_EQ(t.requests[2].end, 3);
}

TEST(Trace, scaled_trace_equals_the_real_trace_at_that_length) {
  // The sizes are affine in seq (the attention scratch is constant), so two traces predict a
  // third exactly while the request structure stays the same.
  Model model(testing::tiny_config(), cpu_backend());
  const Trace t16 = testing::tiny_trace(model, 2, 16), t32 = testing::tiny_trace(model, 2, 32);
  const Trace t48 = testing::tiny_trace(model, 2, 48);
  const Trace scaled = scale_trace(t32, t16, 48);
  ASSERT_EQ(scaled.requests.size(), t48.requests.size());
  for (size_t i = 0; i < scaled.requests.size(); ++i) {
    EXPECT_EQ(scaled.requests[i].name, t48.requests[i].name);
    EXPECT_EQ(scaled.requests[i].bytes, t48.requests[i].bytes) << t48.requests[i].name;
  }
  EXPECT_EQ(plan_activations(scaled).arena_bytes, plan_activations(t48).arena_bytes);
}

}  // namespace
TEST(TraceRecorder, bytes_come_from_the_dtype) {
  TraceRecorder rec;
  rec.release(rec.acquire("half", {10, 3}, ActKind::kTransient, DType::kBF16));
  rec.release(rec.acquire("full", {10, 3}, ActKind::kTransient, DType::kF32));
  const Trace t = rec.finish(1, 1);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].bytes, 60);
  EXPECT_EQ(t.requests[0].dtype, DType::kBF16);
  EXPECT_EQ(t.requests[1].bytes, 120);
  EXPECT_EQ(t.requests[1].dtype, DType::kF32);
}

}  // namespace memo
