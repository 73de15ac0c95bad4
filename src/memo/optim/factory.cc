#include "memo/optim/factory.h"

#include "memo/core/json_excerpt.h"

namespace memo {

namespace {

std::string valid_names() {
  std::string out;
  for (const std::string& n : optimizer_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

[[noreturn]] void throw_unknown(const std::string& name) {
  throw ConfigError(str("unknown optimizer '", name, "'; valid: ", valid_names()));
}

// Replaces target's fields by those present in h; every key of h must be a field of T.
template <class T>
void merge(T& target, const std::string& name, const nlohmann::json& h) {
  if (!h.is_object())
    throw ConfigError(str(name, " hyperparameters must be a JSON object, got ", json_excerpt(h)));
  nlohmann::json current = target;
  for (const auto& [key, value] : h.items()) {
    if (!current.contains(key)) {
      std::string keys;
      for (const auto& [k, v] : current.items()) keys += (keys.empty() ? "" : ", ") + k;
      throw ConfigError(str("unknown ", name, " hyperparameter '", key, "'; valid: ", keys));
    }
    const bool want_bool = current[key].is_boolean();
    if (want_bool ? !value.is_boolean() : !value.is_number())
      throw ConfigError(str(name, " hyperparameter '", key, "' = ", json_excerpt(value),
                            " must be a ", want_bool ? "boolean" : "number"));
    current[key] = value;
  }
  target = current.get<T>();
}

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd",     "signsgd", "adam",      "adamw",
                                                 "adagrad", "rmsprop", "adafactor", "lion"};
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const ParamLayout& layout,
                                          const OptimizerOptions& o, Backend& backend) {
  std::vector<bool> decay = o.decay.empty() ? decay_matrices_only(layout) : o.decay;
  if (name == "sgd") return std::make_unique<Sgd>(layout, o.sgd, std::move(decay), backend);
  if (name == "signsgd")
    return std::make_unique<SignSgd>(layout, o.signsgd, std::move(decay), backend);
  if (name == "adam") return std::make_unique<Adam>(layout, o.adam, std::move(decay), backend);
  if (name == "adamw") return std::make_unique<AdamW>(layout, o.adamw, std::move(decay), backend);
  if (name == "adagrad")
    return std::make_unique<Adagrad>(layout, o.adagrad, std::move(decay), backend);
  if (name == "rmsprop")
    return std::make_unique<Rmsprop>(layout, o.rmsprop, std::move(decay), backend);
  if (name == "adafactor")
    return std::make_unique<Adafactor>(layout, o.adafactor, std::move(decay), backend);
  if (name == "lion") return std::make_unique<Lion>(layout, o.lion, std::move(decay), backend);
  throw_unknown(name);
}

int64_t optimizer_state_bytes(const std::string& name, const ParamLayout& layout,
                              const OptimizerOptions& o) {
  const int64_t n = layout.total_numel();
  int64_t floats = 0;
  if (name == "sgd")
    floats = o.sgd.momentum > 0.0 ? n : 0;
  else if (name == "signsgd")
    floats = o.signsgd.momentum > 0.0 ? n : 0;
  else if (name == "adam" || name == "adamw")
    floats = 2 * n;
  else if (name == "adagrad" || name == "lion")
    floats = n;
  else if (name == "rmsprop")
    floats = n * (1 + (o.rmsprop.centered ? 1 : 0) + (o.rmsprop.momentum > 0.0 ? 1 : 0));
  else if (name == "adafactor")
    floats = Adafactor::state_numel(layout, o.adafactor);
  else
    throw_unknown(name);
  return floats * int64_t(sizeof(float));
}

OptimizerOptions with_hyperparameters(OptimizerOptions o, const std::string& name,
                                      const nlohmann::json& h) {
  if (name == "sgd")
    merge(o.sgd, name, h);
  else if (name == "signsgd")
    merge(o.signsgd, name, h);
  else if (name == "adam")
    merge(o.adam, name, h);
  else if (name == "adamw")
    merge(o.adamw, name, h);
  else if (name == "adagrad")
    merge(o.adagrad, name, h);
  else if (name == "rmsprop")
    merge(o.rmsprop, name, h);
  else if (name == "adafactor")
    merge(o.adafactor, name, h);
  else if (name == "lion")
    merge(o.lion, name, h);
  else
    throw_unknown(name);
  return o;
}

}  // namespace memo
