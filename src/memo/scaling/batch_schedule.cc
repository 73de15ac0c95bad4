#include "memo/scaling/batch_schedule.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"

namespace memo::scaling {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Hex floats ("%a") are exact in both directions, unlike a decimal that has to be long enough.
std::string hex_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

double parse_hex_double(const nlohmann::json& j, const char* field) {
  if (!j.is_string())
    throw FormatError(str("batch schedule state: '", field, "' must be a hex-float string, got ",
                          json_excerpt(j)));
  const std::string s = j.get<std::string>();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    throw FormatError(str("batch schedule: '", field, "' = \"", s, "\" is not a double"));
  return v;
}

int64_t parse_int(const nlohmann::json& j, const char* field) {
  if (!j.contains(field) || !j.at(field).is_number_integer())
    throw FormatError(str("batch schedule: '", field, "' must be an integer"));
  return j.at(field).get<int64_t>();
}

}  // namespace

double TokenLrSchedule::lr(double peak_lr, int64_t tokens_end) const {
  // The same expressions, in the same order, as memo::LrSchedule::at (train/schedule.h).
  if (warmup_tokens > 0 && tokens_end <= warmup_tokens)
    return peak_lr * double(tokens_end) / double(warmup_tokens);
  const double min_lr = peak_lr * min_lr_ratio;
  const int64_t decay_tokens = total_tokens - warmup_tokens;
  if (decay_tokens <= 0) return peak_lr;
  const double progress =
      std::clamp(double(tokens_end - warmup_tokens) / double(decay_tokens), 0.0, 1.0);
  return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(kPi * progress));
}

Law law_for_optimizer(const std::string& optimizer_name) {
  return optimizer_name == "sgd" ? Law::kSgd : Law::kSurge;
}

LawParams law_params_from_sweep(const SweepAnalysis& analysis, Law law) {
  if (law != Law::kSurge && law != Law::kSgd)
    throw ConfigError(str("--law ", law_name(law), " is not surge or sgd"));
  for (const LawFit& f : analysis.laws.fits) {
    if (f.law != law) continue;
    if (!(f.params.at(1) > 0))
      throw ConfigError(str("--fit ", analysis.path, ": the ", law_name(law),
                            " law's fit puts B_noise at ", f.params.at(1),
                            " tokens, the edge of its range: the sweep does not pin it down "
                            "(sweep batches on both sides of the optimum's turn, or give "
                            "--eps-max and --b-noise)"));
    return {f.params.at(0), f.params.at(1)};
  }
  throw ConfigError(str(analysis.path, " has no ", law_name(law), " law fit"));
}

void check_options(const BatchScheduleOptions& o) {
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.micro_batch <= 0)
    throw ConfigError(str("--micro-batch ", o.micro_batch, " must be positive"));
  if (o.batch < 2 * o.micro_batch || o.batch % o.micro_batch != 0)
    throw ConfigError(str("--batch ", o.batch, " must be a multiple of --micro-batch ",
                          o.micro_batch, " and at least 2 micro-batches (", 2 * o.micro_batch,
                          ") for --batch-schedule noise: B_simple needs 2 micro-batches per step"));
  if (o.max_batch < o.batch || o.max_batch % o.micro_batch != 0)
    throw ConfigError(str("--max-batch ", o.max_batch, " must be a multiple of --micro-batch ",
                          o.micro_batch, " in [--batch ", o.batch, ", inf)"));
  if (!(o.noise_multiple > 0.0 && o.noise_multiple <= 1e6))
    throw ConfigError(str("--noise-multiple ", o.noise_multiple, " is outside (0, 1e6]"));
  if (!(o.hysteresis >= 0.0 && o.hysteresis <= 10.0))
    throw ConfigError(str("--noise-hysteresis ", o.hysteresis, " is outside [0, 10]"));
  if (o.patience < 1) throw ConfigError(str("--noise-patience ", o.patience, " must be >= 1"));
  if (o.min_observations < 1)
    throw ConfigError(str("--noise-min-steps ", o.min_observations, " must be >= 1"));
  if (o.law != Law::kSurge && o.law != Law::kSgd)
    throw ConfigError(str("--law ", law_name(o.law), " is not surge or sgd"));
  if (!(o.law_params.eps_max > 0.0 && std::isfinite(o.law_params.eps_max)))
    throw ConfigError(str("--eps-max ", o.law_params.eps_max, " must be positive and finite"));
  if (!(o.law_params.b_noise > 0.0 && std::isfinite(o.law_params.b_noise)))
    throw ConfigError(
        str("--b-noise ", o.law_params.b_noise, " tokens must be positive and finite"));
  const TokenLrSchedule& s = o.schedule;
  if (s.total_tokens <= 0)
    throw ConfigError(str("the token budget ", s.total_tokens, " must be positive"));
  if (s.warmup_tokens < 0 || s.warmup_tokens > s.total_tokens)
    throw ConfigError(str("--warmup of ", s.warmup_tokens, " tokens is outside [0, ",
                          s.total_tokens, "] (the token budget)"));
  if (!(s.min_lr_ratio >= 0.0 && s.min_lr_ratio <= 1.0))
    throw ConfigError(str("--min-lr-ratio ", s.min_lr_ratio, " is outside [0, 1]"));
}

nlohmann::json to_json(const BatchScheduleState& s) {
  return {{"version", 1},
          {"steps", s.steps},
          {"tokens", s.tokens},
          {"batch", s.batch},
          {"observations", s.observations},
          {"streak", s.streak},
          {"streak_min_b_simple", hex_double(s.streak_min_b_simple)},
          {"last_b_simple",
           s.last_b_simple ? nlohmann::json(hex_double(*s.last_b_simple)) : nlohmann::json()}};
}

BatchScheduleState batch_schedule_state_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw FormatError("batch schedule state: not a JSON object");
  if (parse_int(j, "version") != 1)
    throw FormatError(str("batch schedule state: version ", j.at("version"), " is not 1"));
  BatchScheduleState s;
  s.steps = parse_int(j, "steps");
  s.tokens = parse_int(j, "tokens");
  s.batch = parse_int(j, "batch");
  s.observations = parse_int(j, "observations");
  s.streak = parse_int(j, "streak");
  if (!j.contains("streak_min_b_simple") || !j.contains("last_b_simple"))
    throw FormatError(
        "batch schedule state: 'streak_min_b_simple' and 'last_b_simple' are required");
  s.streak_min_b_simple = parse_hex_double(j.at("streak_min_b_simple"), "streak_min_b_simple");
  if (!j.at("last_b_simple").is_null())
    s.last_b_simple = parse_hex_double(j.at("last_b_simple"), "last_b_simple");
  return s;
}

nlohmann::json to_json(const BatchScheduleOptions& o) {
  return {{"seq", o.seq},
          {"micro_batch", o.micro_batch},
          {"batch", o.batch},
          {"max_batch", o.max_batch},
          {"noise_multiple", hex_double(o.noise_multiple)},
          {"hysteresis", hex_double(o.hysteresis)},
          {"patience", o.patience},
          {"min_observations", o.min_observations},
          {"law", law_name(o.law)},
          {"eps_max", hex_double(o.law_params.eps_max)},
          {"b_noise", hex_double(o.law_params.b_noise)},
          {"warmup_tokens", o.schedule.warmup_tokens},
          {"total_tokens", o.schedule.total_tokens},
          {"min_lr_ratio", hex_double(o.schedule.min_lr_ratio)}};
}

BatchScheduleOptions batch_schedule_options_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw FormatError("batch schedule options: not a JSON object");
  auto hex = [&](const char* field) {
    if (!j.contains(field))
      throw FormatError(str("batch schedule options: '", field, "' is missing"));
    return parse_hex_double(j.at(field), field);
  };
  BatchScheduleOptions o;
  o.seq = parse_int(j, "seq");
  o.micro_batch = parse_int(j, "micro_batch");
  o.batch = parse_int(j, "batch");
  o.max_batch = parse_int(j, "max_batch");
  o.noise_multiple = hex("noise_multiple");
  o.hysteresis = hex("hysteresis");
  o.patience = parse_int(j, "patience");
  o.min_observations = parse_int(j, "min_observations");
  const std::string law = j.value("law", "");
  if (law != "surge" && law != "sgd")
    throw FormatError(str("batch schedule options: 'law' must be \"surge\" or \"sgd\", got ",
                          j.contains("law") ? json_excerpt(j.at("law")) : "nothing"));
  o.law = law == "surge" ? Law::kSurge : Law::kSgd;
  o.law_params = {hex("eps_max"), hex("b_noise")};
  o.schedule.warmup_tokens = parse_int(j, "warmup_tokens");
  o.schedule.total_tokens = parse_int(j, "total_tokens");
  o.schedule.min_lr_ratio = hex("min_lr_ratio");
  return o;
}

nlohmann::json BatchChange::to_json() const {
  return {{"event", "batch_change"}, {"step", step},        {"tokens", tokens},
          {"old_batch", old_batch},  {"batch", batch},      {"batch_tokens", batch_tokens},
          {"lr_law", lr_law},        {"b_simple", b_simple}};
}

BatchSchedule::BatchSchedule(const BatchScheduleOptions& options) : options_(options) {
  check_options(options_);
  state_.batch = options_.batch;
}

BatchSchedule::BatchSchedule(const BatchScheduleOptions& options, const BatchScheduleState& state)
    : options_(options), state_(state) {
  check_options(options_);
  const BatchScheduleState& s = state_;
  if (s.batch < options_.batch || s.batch > options_.max_batch ||
      s.batch % options_.micro_batch != 0)
    throw FormatError(str("batch schedule state: batch ", s.batch,
                          " is not a multiple of --micro-batch ", options_.micro_batch,
                          " in [--batch ", options_.batch, ", --max-batch ", options_.max_batch,
                          "]"));
  if (s.steps < 0 || s.tokens < 0 || s.observations < 0 || s.streak < 0 ||
      s.observations > s.steps || s.streak > s.observations)
    throw FormatError(str("batch schedule state: counters are inconsistent (steps ", s.steps,
                          ", tokens ", s.tokens, ", observations ", s.observations, ", streak ",
                          s.streak, ")"));
}

double BatchSchedule::law_lr_for(int64_t batch_tokens) const {
  return law_lr(options_.law, {options_.law_params.eps_max, options_.law_params.b_noise},
                double(batch_tokens));
}

StepPlan BatchSchedule::next() const {
  StepPlan p;
  p.step = state_.steps + 1;
  p.batch = state_.batch;
  p.micro_batches = state_.batch / options_.micro_batch;
  p.batch_tokens = state_.batch * options_.seq;
  p.tokens_end = state_.tokens + p.batch_tokens;
  p.lr_law = law_lr_for(p.batch_tokens);
  p.lr = options_.schedule.lr(p.lr_law, p.tokens_end);
  return p;
}

// see Note [Noise batch schedule]
std::optional<BatchChange> BatchSchedule::observe(std::optional<double> b_simple) {
  BatchScheduleState& s = state_;
  const int64_t batch_tokens = s.batch * options_.seq;
  ++s.steps;
  s.tokens += batch_tokens;
  if (!b_simple || !std::isfinite(*b_simple) || !(*b_simple > 0.0)) {
    s.streak = 0;  // unknown: the gradient is still within the noise, or nothing was measured
    return std::nullopt;
  }
  ++s.observations;
  s.last_b_simple = *b_simple;
  const double k = options_.noise_multiple;
  const bool above = s.observations >= options_.min_observations &&
                     k * *b_simple >= (1.0 + options_.hysteresis) * double(batch_tokens);
  if (!above) {
    s.streak = 0;
    return std::nullopt;
  }
  s.streak_min_b_simple = s.streak == 0 ? *b_simple : std::min(s.streak_min_b_simple, *b_simple);
  ++s.streak;
  if (s.streak < options_.patience || s.batch == options_.max_batch) return std::nullopt;
  const double micro_tokens = double(options_.micro_batch * options_.seq);
  const double micro_batches = std::floor(k * s.streak_min_b_simple / micro_tokens);
  const double max_micro_batches = double(options_.max_batch / options_.micro_batch);
  const int64_t batch = int64_t(std::min(micro_batches, max_micro_batches)) * options_.micro_batch;
  if (batch <= s.batch) {
    // The band was passed by less than a micro-batch (h smaller than a micro-batch's share of
    // the batch): start a new streak, so that its minimum is the last `patience` steps' and not
    // frozen at the first value above the band, which would hold the batch forever.
    s.streak = 0;
    return std::nullopt;
  }
  BatchChange c;
  c.step = s.steps;
  c.tokens = s.tokens;
  c.old_batch = s.batch;
  c.batch = batch;
  c.batch_tokens = batch * options_.seq;
  c.lr_law = law_lr_for(c.batch_tokens);
  c.b_simple = s.streak_min_b_simple;
  s.batch = batch;
  s.streak = 0;
  return c;
}

}  // namespace memo::scaling
