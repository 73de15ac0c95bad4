// sgd, adam, adamw, adagrad and rmsprop against torch.optim (Debian's python3-torch 1.13 via
// /usr/bin/python3 and scripts/torch_optim_reference.py) on the same parameters and gradients.
// A failing script fails the tests: the oracle is part of the suite, never skipped. All cases go
// to one script call, since importing torch takes seconds.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "memo/cpu/cpu_backend.h"
#include "memo/optim/factory.h"
#include "optim/optim_test_util.h"
#include "test_util.h"

namespace memo {
namespace {

std::string script_path() {
  const char* dir = std::getenv("MEMO_SOURCE_DIR");
  const std::filesystem::path root =
      dir ? std::filesystem::path(dir)
          : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  return (root / "scripts" / "torch_optim_reference.py").string();
}

struct Case {
  std::string label;  // the test that reads it
  std::string optimizer;
  OptimizerOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  OptimizerOptions o;
  o.sgd = {.momentum = 0.9, .dampening = 0.0, .nesterov = true, .weight_decay = 0.05};
  out.push_back({"sgd_nesterov", "sgd", o});
  o.sgd = {.momentum = 0.9, .dampening = 0.3, .nesterov = false, .weight_decay = 0.05};
  out.push_back({"sgd_dampened", "sgd", o});
  o.adam = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
  out.push_back({"adam", "adam", o});
  o.adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  out.push_back({"adamw", "adamw", o});
  o.adagrad = {
      .lr_decay = 0.01, .initial_accumulator_value = 0.1, .eps = 1e-10, .weight_decay = 0.05};
  out.push_back({"adagrad", "adagrad", o});
  o.rmsprop = {.alpha = 0.9, .eps = 1e-8, .momentum = 0.5, .centered = true, .weight_decay = 0.05};
  out.push_back({"rmsprop_centered", "rmsprop", o});
  o.rmsprop = {};
  o.rmsprop.weight_decay = 0.05;
  out.push_back({"rmsprop_plain", "rmsprop", o});
  return out;
}

class TorchOptim : public ::testing::Test {
 protected:
  struct Result {
    std::vector<float> memo;  // final parameters, flat with padding
    test::Params64 torch;     // final parameters per tensor
  };

  // Runs every case kSteps steps in memo and records the torch input; then one script call.
  static void SetUpTestSuite() {
    layout_ = new ParamLayout(test::tiny_config());
    const ParamLayout& layout = *layout_;
    const std::vector<bool> decay = decay_matrices_only(layout);
    nlohmann::json input;
    for (const Case& c : cases()) {
      auto opt = make_optimizer(c.optimizer, layout, c.options, cpu_backend());
      AlignedBuffer<float> p(layout.total_numel()), g(layout.total_numel());
      test::fill_params(layout, p.data(), 5);
      nlohmann::json spec = {{"optimizer", c.optimizer},
                             {"hyperparameters", opt->hyperparameters()}};
      for (size_t i = 0; i < layout.params().size(); ++i) {
        const ParamInfo& info = layout.params()[i];
        const float* x = p.data() + info.offset;
        spec["tensors"].push_back({{"name", info.name},
                                   {"shape", info.shape},
                                   {"decay", decay[i]},
                                   {"data", std::vector<float>(x, x + info.numel)}});
      }
      for (int t = 1; t <= test::kSteps; ++t) {
        const double lr = 0.01 * (1.0 + 0.25 * t);
        test::fill_grads(layout, g.data(), 6, t);
        opt->step(p.view(), g.view(), lr);
        nlohmann::json step_grads = nlohmann::json::array();
        for (const ParamInfo& info : layout.params()) {
          const float* x = g.data() + info.offset;
          step_grads.push_back(std::vector<float>(x, x + info.numel));
        }
        spec["grads"].push_back(step_grads);
        spec["lrs"].push_back(lr);
      }
      input["cases"].push_back(spec);
      (*results_)[c.label].memo.assign(p.data(), p.data() + layout.total_numel());
    }
    test::TempDir dir;
    std::ofstream(dir / "in.json") << input.dump();
    const test::CommandResult r = test::run_command("/usr/bin/python3 " + script_path() + " " +
                                                    dir.str("in.json") + " " + dir.str("out.json"));
    *script_output_ = r.output;
    script_ok_ = r.exit_code == 0;
    if (!script_ok_) return;
    const nlohmann::json out = nlohmann::json::parse(std::ifstream(dir / "out.json"));
    const std::vector<Case> all = cases();
    for (size_t k = 0; k < all.size(); ++k)
      for (const nlohmann::json& t : out.at("cases").at(k).at("tensors"))
        (*results_)[all[k].label].torch.push_back(t.at("data").get<std::vector<double>>());
  }

  static void TearDownTestSuite() {
    delete layout_;
    layout_ = nullptr;
  }

  static void check(const std::string& label) {
    ASSERT_TRUE(script_ok_) << "torch_optim_reference.py failed:\n" << *script_output_;
    const Result& r = results_->at(label);
    // Both sides are fp32 with the same operation order but not the same instructions (FMA
    // contraction, vectorised sqrt and division): a few ulp per step, far below kAtol/kRtol.
    test::expect_close(*layout_, r.memo.data(), r.torch, test::kAtol, test::kRtol);
  }

  static inline ParamLayout* layout_ = nullptr;
  static inline std::map<std::string, Result>* results_ = new std::map<std::string, Result>;
  static inline std::string* script_output_ = new std::string;
  static inline bool script_ok_ = false;
};

TEST_F(TorchOptim, sgd_nesterov_matches_torch) { check("sgd_nesterov"); }
TEST_F(TorchOptim, sgd_dampened_momentum_matches_torch) { check("sgd_dampened"); }
TEST_F(TorchOptim, adam_matches_torch) { check("adam"); }
TEST_F(TorchOptim, adamw_matches_torch) { check("adamw"); }
TEST_F(TorchOptim, adagrad_matches_torch) { check("adagrad"); }
TEST_F(TorchOptim, rmsprop_centered_momentum_matches_torch) { check("rmsprop_centered"); }
TEST_F(TorchOptim, rmsprop_plain_matches_torch) { check("rmsprop_plain"); }

TEST(TorchOptimScript, unknown_optimizer_fails_with_a_message) {
  test::TempDir dir;
  std::ofstream(dir / "in.json") << R"({"cases": [{"optimizer": "lion", "hyperparameters": {},
      "lrs": [], "tensors": [], "grads": []}]})";
  const test::CommandResult r = test::run_command("/usr/bin/python3 " + script_path() + " " +
                                                  dir.str("in.json") + " " + dir.str("out.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no torch counterpart for optimizer 'lion'"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace memo
