// What each step of memo train runs: its micro-batch count, its tokens and its learning rate.
// Either a fixed batch with the step-based warm-up and cosine decay (schedule.h), or the
// noise-driven batch schedule of `--batch-schedule noise` (scaling/batch_schedule.h: the batch
// grows in whole micro-batches to track K x B_simple, the lr is the law's for the batch, warm-up
// and decay are in tokens). Not here: running a step (step.h) or measuring B_simple (grad_noise.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memo/scaling/batch_schedule.h"
#include "memo/train/schedule.h"
#include "memo/train/train_options.h"

namespace memo {

struct StepRun {            // what the trainer runs as step `step`
  int64_t step = 0;         // 1-based
  int64_t batch = 0;        // sequences
  int64_t micro_steps = 0;  // micro-batches of the stage's micro-batch sequences
  int64_t tokens = 0;       // this step's tokens: batch x seq
  int64_t tokens_end = 0;   // tokens seen once this step is done, counted from the run's start
  double lr = 0.0;
  int stage = 0;    // Note [Length stages]: 0 without --seq-schedule
  int64_t seq = 0;  // the stage's tokens per sequence
};

// Note [Length stages]
// --seq-schedule "SEQ:STEPS,..." runs a length curriculum as one run: stage k runs STEPS_k
// steps of SEQ_k-token sequences (1K = 1024). Each stage keeps the first stage's tokens per step,
// so a step of stage k has batch_k = --batch SEQ_0 / SEQ_k sequences, and its tokens per
// micro-batch, micro_k = --micro-batch SEQ_0 / SEQ_k sequences (at least one: a sequence longer
// than a micro-batch's tokens is one micro-batch of its own); --stage-batch sequences keeps
// --batch and --micro-batch sequences instead (more tokens a step as they grow). STEPS may be
// tokens with a t suffix
// ("16K:32Mt"): the steps that hold that many, rounded up. The learning rate runs one schedule
// over every stage's steps (--warmup, then one cosine), and the counter-based sampler draws each
// step's windows at its stage's length, so a run resumed mid-stage or at a boundary continues bit
// for bit. The session checks every stage against --device-memory before step 1 and, as a stage
// starts, rebuilds what depends on the length (the sampler, the static plan, the activation
// strategy and its split, the step), keeping the model, the optimiser and the noise estimator.
// --stage-rope gives a stage its own RoPE base, scaling or position count (the move of Llama 3's
// and Qwen2.5-1M's long stages), set on the model as the stage starts; its checkpoints' config.json
// carry them, so a checkpoint loads as the model it is at that step.
// With --batch-schedule noise (Note [Noise batch schedule]) the stages are spans of tokens, not of
// steps: the noise schedule's batch grows, so stage k starts at the first step that begins with
// at least the tokens of the stages before it (each stage's steps x tokens per step, the spans of
// the same schedule with a fixed batch). The schedule counts its batch in sequences of the first
// stage's length; a step of stage k runs that batch's tokens as SEQ_k-token sequences, in
// micro-batches of the same tokens as stage 1's (check_noise_stages), so its micro-batch count,
// the noise probe's tokens per micro-batch and the schedule's growth unit hold across stages.
// The most tokens a step and a micro-batch of a run may hold: past them a run's token counts
// could overflow, and no machine holds a micro-batch's buffers (memo plan refuses the same).
inline constexpr int64_t kMaxStepTokens = int64_t(1) << 40;
inline constexpr int64_t kMaxMicroBatchTokens = int64_t(1) << 32;
// The most micro-batches a step may run: the noise probe keeps a norm of each, and the plans of
// the pipeline count them in an int (16M: a step of 4M tokens in micro-batches of one 512-token
// sequence needs 8,192).
inline constexpr int64_t kMaxMicroSteps = int64_t(1) << 24;
// ConfigError where a step of `batch` sequences of seq tokens (all positive) exceeds
// kMaxStepTokens ("WHAT x --seq S tokens a step: ...") or holds more than kMaxMicroSteps
// micro-batches of micro_batch ("WHAT in micro-batches of M sequences: ..."); what names the
// batch ("--batch 8").
void check_step_bounds(const std::string& what, int64_t batch, int64_t micro_batch, int64_t seq);
// ConfigError where --batch sequences of seq tokens (both positive) exceed kMaxMicroBatchTokens:
// "--batch B x --seq S tokens: memo <verb> micro-batches of at most 2^32 (...) tokens".
void check_micro_batch_tokens(int64_t batch, int64_t seq, const char* verb);

struct SeqStage {
  int64_t seq = 0, batch = 0, micro_batch = 0, steps = 0;
  int64_t first_step = 1;  // the run's number of the stage's first step
};
// The stages of o (o.micro_batch already defaulted; o.stage_batch "tokens" or "sequences"): one
// of o.seq for o.steps without --seq-schedule. ConfigError naming the item for a malformed list,
// and naming the stage for a length that does not split the first stage's tokens per step or per
// micro-batch into whole sequences.
std::vector<SeqStage> seq_stages(const TrainOptions& o);
// --stage-rope: the position fields each of `stages` stages sets as it starts (none: empty), a
// stage's holding every earlier stage's too (applied in order, each field as given: Note [Length
// stages]). ConfigError naming the item for a malformed one, a stage past the schedule, a field
// that is not a position field, or a model without RoPE.
std::vector<PositionOverrides> stage_positions(const std::vector<std::string>& items,
                                               size_t stages);

// A noise schedule over length stages (Note [Length stages]): every stage's tokens per step and
// per micro-batch are the first stage's (not --stage-batch sequences; no sequence longer than a
// micro-batch's tokens). ConfigError naming the stage and what would fit otherwise.
void check_noise_stages(const TrainOptions& o, const std::vector<SeqStage>& stages);

// --max-batch when not given: this many times --batch.
inline constexpr int64_t kDefaultMaxBatchMultiple = 16;

// The noise schedule of a fresh run: o.batch_schedule's own flags, with seq, micro_batch and
// batch from o, max_batch kDefaultMaxBatchMultiple x batch when 0, and the fixed run's schedule
// in tokens: warm-up o.warmup x batch x seq, the budget o.steps x batch x seq (then decay ends
// where it would for a fixed batch, after the same tokens). Not checked here: see check_options.
scaling::BatchScheduleOptions noise_schedule_options(const TrainOptions& o);

// The noise schedule a checkpoint saved (trainer_state.json "batch_schedule"), checked against
// the checkpoint's step; none for a run with a fixed batch. Throws FormatError naming `where`.
std::optional<scaling::BatchSchedule> noise_schedule_from_checkpoint(
    const nlohmann::json& trainer_state, int64_t step, const std::string& where);

class StepSchedule {
 public:
  // A fixed batch: o.batch / o.micro_batch micro-batches per step for steps start_step + 1 ..
  // o.steps, lr LrSchedule{o.lr, o.lr o.min_lr_ratio, o.warmup, o.steps}.at(step), as always;
  // with stages (seq_stages(o), whose steps add up to o.steps) each step has its stage's shape.
  StepSchedule(const TrainOptions& o, int64_t start_step);
  // The noise-driven schedule, from its start or from a restored state, run in micro-batches of
  // micro_batch sequences (its growth unit, options().micro_batch, is a multiple: micro_batch x
  // the data-parallel ranks); over `stages` (check_noise_stages) when more than one, each a span
  // of tokens (Note [Length stages]).
  StepSchedule(const scaling::BatchSchedule& noise, int64_t micro_batch,
               std::vector<SeqStage> stages = {});

  StepRun next() const;
  // After the step next() gave ran; b_simple: the noise-scale estimate after this step's update.
  // Returns the batch change a noise schedule makes from the next step on.
  std::optional<scaling::BatchChange> observe(std::optional<double> b_simple);
  // Fixed: o.steps steps done; noise: the token budget spent (the last step may pass it by less
  // than one batch).
  bool done() const;
  int64_t total_tokens() const;
  int64_t max_micro_steps() const;  // the most micro-batches any step will run
  const scaling::BatchSchedule* noise() const { return noise_ ? &*noise_ : nullptr; }
  // trainer_state.json's "batch_schedule": the noise schedule's {"options", "state"} (exact: hex
  // floats); null for a fixed batch.
  nlohmann::json checkpoint_json() const;
  // One progress line (no newline) saying what the noise schedule will do; empty when fixed.
  std::string summary() const;

 private:
  // Noise: the stage of a step that starts after `tokens` tokens, and its sequences for a batch
  // of `batch` first-stage sequences.
  int noise_stage(int64_t tokens) const;
  int64_t noise_sequences(int64_t batch, int stage) const;

  LrSchedule fixed_lr_;  // fixed batch only
  int64_t steps_done_ = 0;
  int64_t total_steps_ = 0;
  std::vector<SeqStage> stages_;  // noise: empty for one stage
  std::vector<int64_t> starts_;   // noise with stages: the tokens before each stage
  int64_t seq_ = 0;               // noise
  int64_t micro_batch_ = 0;       // noise: sequences per micro-batch
  std::optional<scaling::BatchSchedule> noise_;
};

// The progress line (no newline) of a batch change: old and new batch, where, the B_simple that
// sized it and the law's lr for the new batch.
std::string batch_change_line(const scaling::BatchChange& change,
                              const scaling::BatchScheduleOptions& options);

}  // namespace memo
