#include "memo/train/step_schedule.h"

#include <cstdio>

#include "memo/core/error.h"

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

StepSchedule::StepSchedule(const TrainOptions& o, int64_t start_step)
    : fixed_lr_{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.steps},
      steps_done_(start_step),
      total_steps_(o.steps),
      batch_(o.batch),
      micro_steps_(o.batch / o.micro_batch),
      seq_(o.seq) {}

StepSchedule::StepSchedule(const scaling::BatchSchedule& noise, int64_t micro_batch)
    : micro_batch_(micro_batch), noise_(noise) {
  MEMO_CHECK(micro_batch > 0 && noise.options().micro_batch % micro_batch == 0,
             "StepSchedule: the schedule's unit of ", noise.options().micro_batch,
             " sequences is not a multiple of micro-batches of ", micro_batch);
}

StepRun StepSchedule::next() const {
  if (noise_) {
    const scaling::StepPlan p = noise_->next();
    return {p.step, p.batch, p.batch / micro_batch_, p.batch_tokens, p.tokens_end, p.lr};
  }
  const int64_t step = steps_done_ + 1;
  const int64_t tokens = batch_ * seq_;
  return {step, batch_, micro_steps_, tokens, step * tokens, fixed_lr_.at(step)};
}

std::optional<scaling::BatchChange> StepSchedule::observe(std::optional<double> b_simple) {
  if (noise_) return noise_->observe(b_simple);
  ++steps_done_;
  return std::nullopt;
}

bool StepSchedule::done() const { return noise_ ? noise_->done() : steps_done_ >= total_steps_; }

int64_t StepSchedule::total_tokens() const {
  return noise_ ? noise_->options().schedule.total_tokens : total_steps_ * batch_ * seq_;
}

int64_t StepSchedule::max_micro_steps() const {
  return noise_ ? noise_->options().max_batch / micro_batch_ : micro_steps_;
}

nlohmann::json StepSchedule::checkpoint_json() const {
  if (!noise_) return nullptr;
  return {{"options", scaling::to_json(noise_->options())},
          {"state", scaling::to_json(noise_->state())}};
}

std::string StepSchedule::summary() const {
  if (!noise_) return "";
  const scaling::BatchScheduleOptions& o = noise_->options();
  char line[600];
  std::snprintf(line, sizeof line,
                "memo: batch schedule noise: %lld sequences per step now, growing in steps of %lld "
                "sequences up to %lld to track %g x B_simple (hysteresis %g, patience %lld steps, "
                "after %lld steps with a B_simple); lr from the %s law (eps_max %.4g, B_noise "
                "%.4g tokens), warm-up over %lld tokens, cosine decay to %g x at %lld tokens",
                static_cast<long long>(noise_->state().batch),
                static_cast<long long>(o.micro_batch), static_cast<long long>(o.max_batch),
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
