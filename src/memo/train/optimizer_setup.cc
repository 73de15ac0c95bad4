#include "memo/train/optimizer_setup.h"

#include <cmath>
#include <vector>

#include "memo/core/error.h"

namespace memo {

void check_tensor_parallel_optimizer(const std::string& optimizer, int64_t tp) {
  if (tp > 1 && optimizer == "adafactor")
    throw ConfigError(str("--tp ", tp, ": Adafactor's factored statistics are of whole ",
                          "matrices, which tensor parallelism splits; use another optimiser"));
}

bool ignores_learning_rate(const OptimizerChoice& c) {
  return c.name == "adafactor" && c.options.adafactor.relative_step;
}

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

void read_into_device(const SafetensorsSet& file, const std::string& name, float* dst,
                      const std::vector<int64_t>& shape, Backend& backend,
                      std::vector<float>& staging) {
  if (backend.host_can_access(backend.device_space())) return file.read_into(name, dst, shape);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  staging.resize(size_t(numel));
  file.read_into(name, staging.data(), shape);
  backend.copy_from_host(dst, staging.data(), numel * int64_t(sizeof(float)));
}

const ParamInfo* split_param(const ParamLayout& layout, const std::string& name, int64_t numel) {
  if (layout.shard().ranks == 1) return nullptr;
  for (const ParamInfo& p : layout.params()) {
    if (!p.is_split() || p.numel != numel || name.size() < p.name.size()) continue;
    const size_t at = name.size() - p.name.size();
    if (name.compare(at, std::string::npos, p.name) == 0 && (at == 0 || name[at - 1] == '.'))
      return &p;
  }
  return nullptr;
}

void read_part_into_device(const SafetensorsSet& file, const std::string& name,
                           const ParamLayout& layout, const ParamInfo* split, float* dst,
                           const std::vector<int64_t>& shape, Backend& backend,
                           std::vector<float>& staging) {
  if (!split) return read_into_device(file, name, dst, shape, backend, staging);
  // The part's elements alone: the whole tensor is never in memory (nor its other pages touched).
  staging.assign(size_t(split->numel), 0.0f);  // a padded part's rows past the whole's end
  file.read_runs_into(name, staging.data(), split->full_shape, shard_runs(*split, layout.shard()));
  backend.copy_from_host(dst, staging.data(), split->numel * int64_t(sizeof(float)));
}

void restore_optimizer(Optimizer& optimizer, Backend& backend, const SafetensorsSet& file,
                       int64_t steps_done, const std::string& source, const ParamLayout& layout) {
  std::vector<float> staging;
  for (const StateTensor& s : optimizer.state()) {
    try {
      read_part_into_device(file, s.name, layout, split_param(layout, s.name, s.numel()), s.data,
                            s.shape, backend, staging);
    } catch (const DataError& e) {
      throw DataError(str(source, ": the ", optimizer.name(), " state tensor ", s.name,
                          " cannot be restored: ", e.what()));
    }
    // A NaN or infinity would carry into every later step, and a negative second moment would
    // make Adam's denominator the root of a negative number. What was read is in s.data where the
    // host reaches it, else in staging.
    const bool second_moment = s.name.starts_with("exp_avg_sq");
    const bool direct = backend.host_can_access(backend.device_space());
    const float* values = direct ? s.data : staging.data();
    const int64_t n = direct ? s.numel() : int64_t(staging.size());
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(values[i]) || (second_moment && values[i] < 0.0f))
        throw DataError(str(source, ": the ", optimizer.name(), " state tensor ", s.name, " holds ",
                            values[i], " at element ", i,
                            second_moment ? " (a second moment is finite and not negative)"
                                          : " (the run diverged before this save?)"));
  }
  optimizer.set_steps_done(steps_done);
}

}  // namespace memo
