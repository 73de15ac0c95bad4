#include "memo/train/step_schedule.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <utility>

#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/io/config_json.h"

namespace memo {

scaling::BatchScheduleOptions noise_schedule_options(const TrainOptions& o) {
  MEMO_CHECK(o.batch_schedule.has_value(), "noise_schedule_options without --batch-schedule noise");
  scaling::BatchScheduleOptions s = *o.batch_schedule;
  s.seq = o.seq;
  s.micro_batch = o.micro_batch;
  s.batch = o.batch;
  if (s.max_batch == 0) s.max_batch = kDefaultMaxBatchMultiple * o.batch;
  const int64_t batch_tokens = o.batch * o.seq;
  s.schedule.warmup_tokens = o.warmup * batch_tokens;
  s.schedule.total_tokens = o.steps * batch_tokens;
  s.schedule.min_lr_ratio = o.min_lr_ratio;
  return s;
}

std::optional<scaling::BatchSchedule> noise_schedule_from_checkpoint(
    const nlohmann::json& trainer_state, int64_t step, const std::string& where) {
  const nlohmann::json j = trainer_state.value("batch_schedule", nlohmann::json());
  if (j.is_null()) return std::nullopt;
  if (!j.is_object() || !j.contains("options") || !j.contains("state"))
    throw FormatError(
        str(where, ": trainer_state.json 'batch_schedule' needs 'options' and 'state'"));
  scaling::BatchSchedule s(scaling::batch_schedule_options_from_json(j.at("options")),
                           scaling::batch_schedule_state_from_json(j.at("state")));
  if (s.state().steps != step)
    throw FormatError(str(where, ": the batch schedule is at step ", s.state().steps,
                          " but the checkpoint at step ", step));
  return s;
}

namespace {

// A stage's tokens a step and a micro-batch within kMaxStepTokens and kMaxMicroBatchTokens, and
// the run's tokens so far (`run_tokens`, this stage's added) within 2^62: checked before they
// are multiplied. `stage`: "" or "--seq-schedule stage K: ".
void check_stage_tokens(const std::string& stage, int64_t batch, int64_t micro_batch, int64_t seq,
                        int64_t steps, int64_t& run_tokens) {
  if (seq <= 0 || batch <= 0 || micro_batch <= 0 || steps <= 0) return;  // refused elsewhere
  check_step_bounds(str(stage, "--batch ", batch), batch, micro_batch, seq);
  if (micro_batch > kMaxMicroBatchTokens / seq)
    throw ConfigError(str(stage, "--micro-batch ", micro_batch, " x --seq ", seq,
                          " tokens a micro-batch: memo runs micro-batches of at most 2^32 (",
                          kMaxMicroBatchTokens, ") tokens; give a smaller --micro-batch"));
  constexpr int64_t kMaxRunTokens = int64_t(1) << 62;
  if (steps > (kMaxRunTokens - run_tokens) / (batch * seq))
    throw ConfigError(str(stage, "--steps ", steps, " of ", batch * seq,
                          " tokens: a run of more than 2^62 tokens"));
  run_tokens += steps * batch * seq;
}

}  // namespace

void check_step_bounds(const std::string& what, int64_t batch, int64_t micro_batch, int64_t seq) {
  if (batch > kMaxStepTokens / seq)
    throw ConfigError(str(what, " x --seq ", seq,
                          " tokens a step: memo runs steps of at most 2^40 (", kMaxStepTokens,
                          ") tokens"));
  if (batch / micro_batch > kMaxMicroSteps)
    throw ConfigError(str(what, " in micro-batches of ", micro_batch,
                          " sequences: memo runs at most 2^24 (", kMaxMicroSteps,
                          ") micro-batches a step; give a larger --micro-batch"));
}

void check_micro_batch_tokens(int64_t batch, int64_t seq, const char* verb) {
  if (seq > 0 && batch > 0 && batch > kMaxMicroBatchTokens / seq)
    throw ConfigError(str("--batch ", batch, " x --seq ", seq, " tokens: memo ", verb,
                          " micro-batches of at most 2^32 (", kMaxMicroBatchTokens, ") tokens"));
}

std::vector<SeqStage> seq_stages(const TrainOptions& o) {
  int64_t run_tokens = 0;
  if (o.seq_schedule.empty()) {
    check_stage_tokens("", o.batch, o.micro_batch, o.seq, o.steps, run_tokens);
    return {{o.seq, o.batch, o.micro_batch, o.steps, 1}};
  }
  const std::string& list = o.seq_schedule;
  struct Item {
    int64_t seq, count;
    bool tokens;  // count is tokens (a t suffix), else steps
  };
  std::vector<Item> items;
  // every item between commas, an empty one too (getline drops a trailing one)
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t comma = list.find(',', from);
    parts.push_back(
        list.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  for (const std::string& item : parts) {
    const size_t colon = item.find(':');
    const std::optional<int64_t> seq =
        colon == std::string::npos ? std::nullopt : parse_token_count(item.substr(0, colon));
    const std::string count = colon == std::string::npos ? "" : item.substr(colon + 1);
    const bool tokens = !count.empty() && count.back() == 't';
    const std::optional<int64_t> n =
        parse_token_count(tokens ? count.substr(0, count.size() - 1) : count);
    if (!seq || !n || (!tokens && count.find_first_not_of("0123456789") != std::string::npos))
      throw ConfigError(str("--seq-schedule ", list, ": '", item,
                            "' is not SEQ:STEPS (STEPS a step count, or tokens with a t suffix; "
                            "1K = 1024), e.g. 4K:2000,16K:64Mt"));
    items.push_back({seq.value_or(0), n.value_or(0), tokens});
  }
  if (items.empty()) throw ConfigError("--seq-schedule is empty; e.g. 4K:2000,16K:500");
  if (o.stage_batch != "tokens" && o.stage_batch != "sequences")
    throw ConfigError(str("--stage-batch ", o.stage_batch, ": write tokens or sequences"));
  const bool sequences = o.stage_batch == "sequences";
  const int64_t seq0 = items[0].seq;
  int64_t unused = 0;  // the stage's steps are not known yet: its shape alone, one step
  check_stage_tokens("--seq-schedule stage 1: ", o.batch, o.micro_batch, seq0, 1, unused);
  const int64_t step_tokens = o.batch * seq0, micro_tokens = o.micro_batch * seq0;
  std::vector<SeqStage> stages;
  int64_t first = 1;
  for (size_t k = 0; k < items.size(); ++k) {
    const int64_t seq = items[k].seq;
    SeqStage s{seq, step_tokens / seq, std::max<int64_t>(1, micro_tokens / seq), 0, first};
    if (sequences) s.batch = o.batch, s.micro_batch = o.micro_batch;
    if (!sequences && (step_tokens % seq != 0 || s.batch % s.micro_batch != 0 ||
                       (micro_tokens >= seq && micro_tokens % seq != 0)))
      throw ConfigError(
          str("--seq-schedule: stage ", k + 1, " (seq ", seq, ") does not split ", step_tokens,
              " tokens per step (--batch ", o.batch, " x ", seq0, ") into micro-batches of ",
              micro_tokens, " tokens (--micro-batch ", o.micro_batch, " x ", seq0,
              ") or of one sequence; use lengths that divide them",
              step_tokens % seq != 0
                  ? str(", a --batch that is a multiple of ", seq / std::gcd(seq, seq0),
                        " (whole sequences of ", seq, " tokens per step)")
                  : std::string(),
              ", or --stage-batch sequences (--batch and --micro-batch sequences "
              "in every stage)"));
    const std::string where = str("--seq-schedule stage ", k + 1, ": ");
    unused = 0;
    check_stage_tokens(where, s.batch, s.micro_batch, seq, 1, unused);
    const int64_t stage_step_tokens = s.batch * seq;
    s.steps = items[k].tokens
                  ? items[k].count / stage_step_tokens + (items[k].count % stage_step_tokens != 0)
                  : items[k].count;
    constexpr int64_t kMaxSteps = int64_t(1) << 40;  // far past any run, far inside int64
    if (s.steps > kMaxSteps - first)
      throw ConfigError(str("--seq-schedule ", list, ": the stages add up to over 2^40 steps"));
    check_stage_tokens(where, s.batch, s.micro_batch, seq, s.steps, run_tokens);
    first += s.steps;
    stages.push_back(s);
  }
  return stages;
}

void check_noise_stages(const TrainOptions& o, const std::vector<SeqStage>& stages) {
  if (stages.size() < 2) return;
  if (o.stage_batch == "sequences")
    throw ConfigError(
        "--batch-schedule noise with --stage-batch sequences: the noise schedule counts a step's "
        "batch in tokens, which it alone grows; keep the tokens per step (--stage-batch tokens)");
  const int64_t micro_tokens = stages[0].micro_batch * stages[0].seq;
  for (size_t k = 1; k < stages.size(); ++k)
    if (stages[k].micro_batch * stages[k].seq != micro_tokens)
      throw ConfigError(str(
          "--batch-schedule noise with --seq-schedule: stage ", k + 1, "'s ", stages[k].seq,
          "-token sequences are longer than a micro-batch's ", micro_tokens,
          " tokens (--micro-batch ", stages[0].micro_batch, " x ", stages[0].seq,
          "); the noise schedule grows the batch in micro-batches of one size: use --micro-batch ",
          (stages[k].seq + stages[0].seq - 1) / stages[0].seq, " or more"));
}

std::vector<PositionOverrides> stage_positions(const std::vector<std::string>& items,
                                               size_t stages) {
  std::vector<PositionOverrides> out(stages);
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::optional<int64_t> k =
        colon == std::string::npos ? std::nullopt : parse_token_count(item.substr(0, colon));
    nlohmann::json j;
    try {
      if (k) j = nlohmann::json::parse(item.substr(colon + 1));
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(str("--stage-rope ", item, ": malformed JSON at byte ", e.byte));
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      throw ConfigError(str("--stage-rope ", item, ": ", e.what()));
    }
    if (!k || !j.is_object())
      throw ConfigError(str("--stage-rope ", item,
                            ": write STAGE:JSON, e.g. 2:{\"rope_theta\": 500000} (the stage "
                            "from 1, the config.json position fields it sets)"));
    if (size_t(*k) > stages)
      throw ConfigError(str("--stage-rope ", item, ": stage ", *k, " of a schedule of ", stages,
                            stages == 1 ? " stage (give --seq-schedule)" : " stages"));
    PositionOverrides& p = out[size_t(*k - 1)];
    const std::string where = str("--stage-rope ", *k);
    for (const auto& [key, value] : j.items()) {
      if (key == "rope_theta" && value.is_number()) {
        p.rope_theta = value.get<double>();
      } else if (key == "max_position_embeddings" && value.is_number_integer()) {
        p.max_position_embeddings = value.get<int64_t>();
      } else if (key == "rope_scaling") {
        p.rope_scaling = rope_scaling_from_json(value, where);
      } else {
        throw ConfigError(str(where, ": '", key, "' ",
                              key == "rope_theta" || key == "max_position_embeddings"
                                  ? "must be a number"
                                  : "is not a position field (rope_theta, rope_scaling, "
                                    "max_position_embeddings)"));
      }
    }
  }
  return out;
}

StepSchedule::StepSchedule(const TrainOptions& o, int64_t start_step)
    : fixed_lr_{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.steps},
      steps_done_(start_step),
      total_steps_(o.steps),
      stages_(seq_stages(o)) {
  MEMO_CHECK(stages_.back().first_step + stages_.back().steps - 1 == o.steps,
             "StepSchedule: stages of ", stages_.back().first_step + stages_.back().steps - 1,
             " steps for --steps ", o.steps);
}

StepSchedule::StepSchedule(const scaling::BatchSchedule& noise, int64_t micro_batch,
                           std::vector<SeqStage> stages)
    : seq_(noise.options().seq), micro_batch_(micro_batch), noise_(noise) {
  MEMO_CHECK(micro_batch > 0 && noise.options().micro_batch % micro_batch == 0,
             "StepSchedule: the schedule's unit of ", noise.options().micro_batch,
             " sequences is not a multiple of micro-batches of ", micro_batch);
  if (stages.size() < 2) return;
  MEMO_CHECK(stages[0].seq == seq_ && stages[0].micro_batch == micro_batch,
             "StepSchedule: a noise schedule of ", seq_, "-token sequences in micro-batches of ",
             micro_batch, " over stages from seq ", stages[0].seq, " in micro-batches of ",
             stages[0].micro_batch);
  int64_t before = 0;
  for (const SeqStage& s : stages) {
    MEMO_CHECK(s.micro_batch * s.seq == micro_batch * seq_, "StepSchedule: stage of seq ", s.seq,
               " with micro-batches of ", s.micro_batch, " under a noise schedule");
    starts_.push_back(before);
    before += s.steps * s.batch * s.seq;
  }
  stages_ = std::move(stages);
}

int StepSchedule::noise_stage(int64_t tokens) const {
  int k = 0;
  while (size_t(k) + 1 < starts_.size() && starts_[size_t(k) + 1] <= tokens) ++k;
  return k;
}

int64_t StepSchedule::noise_sequences(int64_t batch, int stage) const {
  return stages_.empty() ? batch : batch * seq_ / stages_[size_t(stage)].seq;
}

StepRun StepSchedule::next() const {
  if (noise_) {
    const scaling::StepPlan p = noise_->next();
    const int k = noise_stage(noise_->state().tokens);
    return {p.step,
            noise_sequences(p.batch, k),
            p.batch / micro_batch_,
            p.batch_tokens,
            p.tokens_end,
            p.lr,
            k,
            stages_.empty() ? seq_ : stages_[size_t(k)].seq};
  }
  const int64_t step = steps_done_ + 1;
  // the stage of the step (past the end: the last one's shape), and the tokens of the stages
  // before it
  int stage = 0;
  int64_t before = 0;
  while (size_t(stage) + 1 < stages_.size() && stages_[size_t(stage) + 1].first_step <= step) {
    before +=
        stages_[size_t(stage)].steps * stages_[size_t(stage)].batch * stages_[size_t(stage)].seq;
    ++stage;
  }
  const SeqStage& s = stages_[size_t(stage)];
  const int64_t tokens = s.batch * s.seq;
  return {step,
          s.batch,
          s.batch / s.micro_batch,
          tokens,
          before + (step - s.first_step + 1) * tokens,
          fixed_lr_.at(step),
          stage,
          s.seq};
}

std::optional<scaling::BatchChange> StepSchedule::observe(std::optional<double> b_simple) {
  if (noise_) {
    const int ran = noise_stage(noise_->state().tokens);
    std::optional<scaling::BatchChange> change = noise_->observe(b_simple);
    // in sequences of each step's own length: the step that ran, and the next one
    if (change) {
      change->old_batch = noise_sequences(change->old_batch, ran);
      change->batch = noise_sequences(change->batch, noise_stage(noise_->state().tokens));
    }
    return change;
  }
  ++steps_done_;
  return std::nullopt;
}

bool StepSchedule::done() const { return noise_ ? noise_->done() : steps_done_ >= total_steps_; }

int64_t StepSchedule::total_tokens() const {
  if (noise_) return noise_->options().schedule.total_tokens;
  int64_t total = 0;
  for (const SeqStage& s : stages_) total += s.steps * s.batch * s.seq;
  return total;
}

int64_t StepSchedule::max_micro_steps() const {
  if (noise_) return noise_->options().max_batch / micro_batch_;
  int64_t most = 0;
  for (const SeqStage& s : stages_) most = std::max(most, s.batch / s.micro_batch);
  return most;
}

nlohmann::json StepSchedule::checkpoint_json() const {
  if (!noise_) return nullptr;
  return {{"options", scaling::to_json(noise_->options())},
          {"state", scaling::to_json(noise_->state())}};
}

std::string StepSchedule::summary() const {
  if (!noise_) return "";
  const scaling::BatchScheduleOptions& o = noise_->options();
  char line[800];
  std::snprintf(line, sizeof line,
                "memo: batch schedule noise: %lld sequences per step now, growing in steps of %lld "
                "sequences up to %lld%s to track %g x B_simple (hysteresis %g, patience %lld "
                "steps, after %lld steps with a B_simple); lr from the %s law (eps_max %.4g, "
                "B_noise %.4g tokens), warm-up over %lld tokens, cosine decay to %g x at %lld "
                "tokens",
                static_cast<long long>(noise_->state().batch),
                static_cast<long long>(o.micro_batch), static_cast<long long>(o.max_batch),
                stages_.empty() ? ""
                                : str(" (of ", o.seq,
                                      " tokens, stage 1's length; each later stage runs the same "
                                      "tokens as its longer sequences)")
                                      .c_str(),
                o.noise_multiple, o.hysteresis, static_cast<long long>(o.patience),
                static_cast<long long>(o.min_observations), scaling::law_name(o.law).c_str(),
                o.law_params.eps_max, o.law_params.b_noise,
                static_cast<long long>(o.schedule.warmup_tokens), o.schedule.min_lr_ratio,
                static_cast<long long>(o.schedule.total_tokens));
  return line;
}

std::string batch_change_line(const scaling::BatchChange& c,
                              const scaling::BatchScheduleOptions& options) {
  char line[400];
  std::snprintf(line, sizeof line,
                "memo: batch %lld -> %lld sequences (%lld tokens) from step %lld, after %lld "
                "tokens: %g x B_simple %.0f tokens; %s-law lr %.3e before warm-up and decay",
                static_cast<long long>(c.old_batch), static_cast<long long>(c.batch),
                static_cast<long long>(c.batch_tokens), static_cast<long long>(c.step + 1),
                static_cast<long long>(c.tokens), options.noise_multiple, c.b_simple,
                scaling::law_name(options.law).c_str(), c.lr_law);
  return line;
}

}  // namespace memo
