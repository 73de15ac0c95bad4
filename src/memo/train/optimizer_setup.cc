#include "memo/train/optimizer_setup.h"

#include <vector>

#include "memo/core/error.h"

namespace memo {

nlohmann::json hyperparameters_of(const OptimizerChoice& c) {
  const OptimizerOptions& o = c.options;
  if (c.name == "sgd") return o.sgd;
  if (c.name == "signsgd") return o.signsgd;
  if (c.name == "adam") return o.adam;
  if (c.name == "adamw") return o.adamw;
  if (c.name == "adagrad") return o.adagrad;
  if (c.name == "rmsprop") return o.rmsprop;
  if (c.name == "adafactor") return o.adafactor;
  if (c.name == "lion") return o.lion;
  return nlohmann::json();
}

nlohmann::json optimizer_record(const Optimizer& optimizer) {
  return {{"name", optimizer.name()}, {"hyperparameters", optimizer.hyperparameters()}};
}

OptimizerChoice optimizer_choice_from_state(const nlohmann::json& state) {
  OptimizerChoice c;
  const nlohmann::json& opt = state.at("optimizer");
  if (opt.is_object()) {
    c.name = opt.at("name").get<std::string>();
    c.options = with_hyperparameters(c.options, c.name, opt.at("hyperparameters"));
    return c;
  }
  // older checkpoints: "optimizer": "adamw", its options among the pinned training options
  c.name = opt.get<std::string>();
  const nlohmann::json& o = state.at("options");
  nlohmann::json h = nlohmann::json::object();
  for (const char* key : {"beta1", "beta2", "eps", "weight_decay"})
    if (o.contains(key)) h[key] = o.at(key);
  c.options = with_hyperparameters(c.options, c.name, h);
  return c;
}

void restore_optimizer(Optimizer& optimizer, Backend& backend, const SafetensorsFile& file,
                       int64_t steps_done, const std::string& source) {
  const bool direct = backend.host_can_access(backend.device_space());
  std::vector<float> host;
  for (const StateTensor& s : optimizer.state()) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    try {
      if (direct) {
        file.read_into(s.name, s.data, n);
      } else {
        host.resize(size_t(n));
        file.read_into(s.name, host.data(), n);
        backend.copy_from_host(s.data, host.data(), n * int64_t(sizeof(float)));
      }
    } catch (const DataError& e) {
      throw DataError(str(source, ": the ", optimizer.name(), " state tensor ", s.name,
                          " cannot be restored: ", e.what()));
    }
  }
  optimizer.set_steps_done(steps_done);
}

}  // namespace memo
