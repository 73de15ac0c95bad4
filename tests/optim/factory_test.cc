#include "memo/optim/factory.h"

#include <omp.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

// Options that switch on every state buffer, so a restore has something to get wrong.
OptimizerOptions stateful_options() {
  OptimizerOptions o;
  o.sgd.momentum = 0.9;
  o.signsgd.momentum = 0.9;
  o.rmsprop.momentum = 0.5;
  o.rmsprop.centered = true;
  o.adafactor.beta1 = 0.9;
  o.adagrad.initial_accumulator_value = 0.1;
  return o;
}

TEST(Factory, unknown_name_lists_the_valid_ones) {
  ParamLayout layout(test::tiny_config());
  try {
    make_optimizer("adamax", layout, {}, cpu_backend());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown optimizer 'adamax'; valid: sgd, signsgd, adam, adamw, adagrad, rmsprop, "
                 "adafactor, lion");
  }
  EXPECT_THROW(with_hyperparameters({}, "adamax", nlohmann::json::object()), ConfigError);
}

TEST(Factory, every_name_builds_the_named_optimizer) {
  ParamLayout layout(test::tiny_config());
  for (const std::string& name : optimizer_names())
    EXPECT_EQ(make_optimizer(name, layout, {}, cpu_backend())->name(), name);
}

// The device budget counts an optimiser's state before it exists: the prediction must equal the
// buffers the optimiser then allocates, with the default options (some state absent) and with
// every state buffer switched on.
TEST(Factory, state_bytes_predicted_equal_the_state_allocated) {
  ParamLayout layout(test::tiny_config());
  for (const OptimizerOptions& o : {OptimizerOptions{}, stateful_options()})
    for (const std::string& name : optimizer_names()) {
      const int64_t predicted = optimizer_state_bytes(name, layout, o);
      EXPECT_EQ(predicted, make_optimizer(name, layout, o, cpu_backend())->state_bytes()) << name;
      int64_t listed = 0;  // what state() exposes is within the allocation (padding aside)
      for (const StateTensor& t : make_optimizer(name, layout, o, cpu_backend())->state())
        listed += std::accumulate(t.shape.begin(), t.shape.end(), int64_t(1),
                                  std::multiplies<int64_t>()) *
                  int64_t(sizeof(float));
      EXPECT_LE(listed, predicted) << name;
    }
  EXPECT_EQ(optimizer_state_bytes("sgd", layout, {}), 0);  // no momentum: stateless
  EXPECT_EQ(optimizer_state_bytes("adamw", layout, {}), 8 * layout.total_numel());
  EXPECT_THROW(optimizer_state_bytes("adamax", layout, {}), ConfigError);
}

TEST(Factory, decay_mask_of_wrong_length_is_rejected) {
  ParamLayout layout(test::tiny_config());
  OptimizerOptions o;
  o.decay = {true, false};
  for (const std::string& name : optimizer_names())
    EXPECT_THROW(make_optimizer(name, layout, o, cpu_backend()), ConfigError) << name;
}

// See Note [Optimizer state]: 3 steps, save, 3 more; a fresh optimiser restored from the save
// must reproduce the last 3 steps bit for bit.
TEST(Factory, restoring_state_continues_bit_for_bit) {
  ParamLayout layout(test::tiny_config());
  const OptimizerOptions options = stateful_options();
  for (const std::string& name : optimizer_names()) {
    SCOPED_TRACE(name);
    auto a = make_optimizer(name, layout, options, cpu_backend());
    AlignedBuffer<float> p(layout.total_numel()), g(layout.total_numel());
    test::fill_params(layout, p.data(), 1);
    for (int t = 1; t <= 3; ++t) {
      test::fill_grads(layout, g.data(), 2, t);
      a->step(p.view(), g.view(), 0.01);
    }
    std::vector<std::vector<float>> saved;
    size_t n = 0;
    for (const StateTensor& s : a->state()) {
      n = 1;
      for (int64_t d : s.shape) n *= size_t(d);
      saved.emplace_back(s.data, s.data + n);
    }
    const std::vector<float> p_saved(p.data(), p.data() + layout.total_numel());
    auto b = make_optimizer(name, layout, options, cpu_backend());
    const std::vector<StateTensor> b_state = b->state();
    ASSERT_EQ(b_state.size(), saved.size());
    for (size_t k = 0; k < saved.size(); ++k)
      std::memcpy(b_state[k].data, saved[k].data(), saved[k].size() * sizeof(float));
    b->set_steps_done(a->steps_done());
    AlignedBuffer<float> q(layout.total_numel());
    std::memcpy(q.data(), p_saved.data(), p_saved.size() * sizeof(float));
    for (int t = 4; t <= 6; ++t) {
      test::fill_grads(layout, g.data(), 2, t);
      a->step(p.view(), g.view(), 0.01);
      b->step(q.view(), g.view(), 0.01);
    }
    EXPECT_EQ(std::memcmp(p.data(), q.data(), size_t(layout.total_numel()) * sizeof(float)), 0);
  }
}

// Tensors above kParallelMinNumel run threaded; every loop is elementwise or sums fixed chunks in
// order (see Note [Deterministic reductions]), so 1 and 3 threads give the same bits.
TEST(Factory, results_do_not_depend_on_thread_count) {
  ModelConfig config = test::tiny_config();
  config.hidden_size = 128;  // [160, 128] MLP matrices: 20480 elements, threaded
  config.intermediate_size = 160;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  ParamLayout layout(config);
  const OptimizerOptions options = stateful_options();
  const int threads_before = omp_get_max_threads();
  for (const std::string& name : optimizer_names()) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      auto opt = make_optimizer(name, layout, options, cpu_backend());
      AlignedBuffer<float> p(layout.total_numel()), g(layout.total_numel());
      test::fill_params(layout, p.data(), 1);
      for (int t = 1; t <= 2; ++t) {
        test::fill_grads(layout, g.data(), 2, t);
        opt->step(p.view(), g.view(), 0.01);
      }
      results.emplace_back(p.data(), p.data() + layout.total_numel());
    }
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)),
              0)
        << name;
  }
  omp_set_num_threads(threads_before);
}

TEST(Factory, hyperparameters_round_trip_through_json) {
  ParamLayout layout(test::tiny_config());
  const OptimizerOptions options = stateful_options();
  for (const std::string& name : optimizer_names()) {
    const nlohmann::json h =
        make_optimizer(name, layout, options, cpu_backend())->hyperparameters();
    const OptimizerOptions restored = with_hyperparameters({}, name, h);
    EXPECT_EQ(make_optimizer(name, layout, restored, cpu_backend())->hyperparameters(), h) << name;
  }
}

TEST(Factory, unknown_hyperparameter_names_the_valid_keys) {
  try {
    with_hyperparameters({}, "lion", {{"beta3", 0.5}});
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown lion hyperparameter 'beta3'; valid: beta1, beta2, weight_decay");
  }
  EXPECT_THROW(with_hyperparameters({}, "sgd", {{"nesterov", 1.0}}), ConfigError);
}

}  // namespace
}  // namespace memo
