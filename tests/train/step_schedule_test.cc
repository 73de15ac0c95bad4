// What each step of memo train runs (train/step_schedule.h): a fixed batch gives LrSchedule's lr
// and the same micro-batches every step; a noise schedule takes the run's shape and the fixed
// run's budget in tokens, follows its controller step for step (over length stages too, each a
// span of tokens), and its checkpoint record restores it exactly (and is refused at another step).
#include "memo/train/step_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

TrainOptions fixed_options() {
  TrainOptions o;
  o.seq = 32;
  o.batch = 8;
  o.micro_batch = 2;
  o.steps = 12;
  o.warmup = 3;
  o.lr = 2e-3;
  o.min_lr_ratio = 0.25;
  return o;
}

TrainOptions noise_options() {
  TrainOptions o = fixed_options();
  scaling::BatchScheduleOptions s;
  s.law = scaling::Law::kSurge;
  s.law_params = {4e-3, 1000.0};
  s.patience = 1;
  s.min_observations = 1;
  s.hysteresis = 0.0;
  o.batch_schedule = s;
  return o;
}

TEST(StepSchedule, fixed_batch_runs_the_step_lr_schedule_from_the_start_step) {
  const TrainOptions o = fixed_options();
  const LrSchedule lr{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.steps};
  StepSchedule plan(o, 5);
  EXPECT_EQ(plan.noise(), nullptr);
  EXPECT_TRUE(plan.checkpoint_json().is_null());
  EXPECT_EQ(plan.max_micro_steps(), 4);
  EXPECT_EQ(plan.total_tokens(), 12 * 8 * 32);
  int64_t steps = 0;
  while (!plan.done()) {
    const StepRun r = plan.next();
    EXPECT_EQ(r.step, 6 + steps);
    EXPECT_EQ(r.batch, 8);
    EXPECT_EQ(r.micro_steps, 4);
    EXPECT_EQ(r.tokens, 8 * 32);
    EXPECT_EQ(r.tokens_end, r.step * 8 * 32);
    EXPECT_EQ(r.lr, lr.at(r.step));  // the same call as before the schedule existed
    EXPECT_FALSE(plan.observe(1e9).has_value());
    ++steps;
  }
  EXPECT_EQ(steps, 7);
}

// Note [Length stages]: each stage keeps the first's tokens per step (8 x 32 = 256) and per
// micro-batch (2 x 32 = 64, at least one sequence); steps in tokens round up; one lr schedule runs
// over every stage; the bad lists and lengths are refused by name.
TEST(StepSchedule, length_stages_keep_the_tokens_per_step_and_run_one_lr_schedule) {
  TrainOptions o = fixed_options();
  o.seq_schedule = "32:3,64:2,128:600t,256:1";
  const std::vector<SeqStage> stages = seq_stages(o);
  ASSERT_EQ(stages.size(), 4u);
  const int64_t want[4][5] = {
      {32, 8, 2, 3, 1}, {64, 4, 1, 2, 4}, {128, 2, 1, 3, 6}, {256, 1, 1, 1, 9}};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(stages[k].seq, want[k][0]) << k;
    EXPECT_EQ(stages[k].batch, want[k][1]) << k;
    EXPECT_EQ(stages[k].micro_batch, want[k][2]) << k;
    EXPECT_EQ(stages[k].steps, want[k][3]) << k;  // 600 tokens: 3 steps of 256
    EXPECT_EQ(stages[k].first_step, want[k][4]) << k;
  }
  o.steps = 9;
  const LrSchedule lr{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.steps};
  StepSchedule plan(o, 2);  // resumed after step 2
  EXPECT_EQ(plan.max_micro_steps(), 4);
  EXPECT_EQ(plan.total_tokens(), 9 * 256);
  const int want_stage[] = {0, 1, 1, 2, 2, 2, 3};
  for (int64_t i = 0; !plan.done(); ++i) {
    const StepRun r = plan.next();
    EXPECT_EQ(r.step, 3 + i);
    EXPECT_EQ(r.stage, want_stage[i]) << r.step;
    EXPECT_EQ(r.seq, stages[size_t(r.stage)].seq);
    EXPECT_EQ(r.batch, stages[size_t(r.stage)].batch);
    EXPECT_EQ(r.micro_steps, r.batch / stages[size_t(r.stage)].micro_batch);
    EXPECT_EQ(r.tokens, 256);
    EXPECT_EQ(r.tokens_end, r.step * 256);
    EXPECT_EQ(r.lr, lr.at(r.step));
    plan.observe(std::nullopt);
  }
  // --stage-batch sequences: every stage runs --batch 8 in micro-batches of 2, its tokens per
  // step (and a step count given in tokens) at its own length
  o.stage_batch = "sequences";
  o.seq_schedule = "32:3,64:2,128:2100t";
  const std::vector<SeqStage> by_sequences = seq_stages(o);
  ASSERT_EQ(by_sequences.size(), 3u);
  for (const SeqStage& s : by_sequences) {
    EXPECT_EQ(s.batch, 8);
    EXPECT_EQ(s.micro_batch, 2);
  }
  EXPECT_EQ(by_sequences[2].steps, 3);  // 2100 tokens: 3 steps of 8 x 128 = 1024
  o.steps = 8;
  StepSchedule grows(o, 0);
  EXPECT_EQ(grows.total_tokens(), 3 * 256 + 2 * 512 + 3 * 1024);
  int64_t seen = 0;
  while (!grows.done()) {
    const StepRun r = grows.next();
    seen += r.tokens;
    EXPECT_EQ(r.tokens_end, seen) << r.step;
    grows.observe(std::nullopt);
  }
  EXPECT_EQ(seen, grows.total_tokens());
  o.stage_batch = "tokens";
  // 4K = 4096 and micro-batches that stay whole sequences
  o.seq_schedule = "1K:1,4K:1";
  o.batch = 16;
  o.micro_batch = 8;
  EXPECT_EQ(seq_stages(o)[1].seq, 4096);
  EXPECT_EQ(seq_stages(o)[1].batch, 4);
  EXPECT_EQ(seq_stages(o)[1].micro_batch, 2);
  o = fixed_options();
  for (const char* bad : {"32", "32:", "32:x", "0:3", "32:3,64", "32:-1", "32:2.5", "32:3q"}) {
    o.seq_schedule = bad;
    const std::string msg = test::error_message<ConfigError>([&] { seq_stages(o); });
    EXPECT_NE(msg.find("is not SEQ:STEPS"), std::string::npos) << bad << ": " << msg;
  }
  o.seq_schedule = "32:3,48:2";  // 256 tokens per step are not whole 48-token sequences
  const std::string msg = test::error_message<ConfigError>([&] { seq_stages(o); });
  EXPECT_NE(msg.find("stage 2 (seq 48) does not split 256 tokens per step"), std::string::npos)
      << msg;
  // what would: 9 x 32 = 288 tokens are six 48-token sequences
  EXPECT_NE(msg.find("a --batch that is a multiple of 3 (whole sequences of 48 tokens per step)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("or --stage-batch sequences"), std::string::npos) << msg;
  // step counts whose sum would overflow are refused by the flag that gave them
  o.seq_schedule = "32:4611686018427387904,32:4611686018427387904";
  EXPECT_NE(test::error_message<ConfigError>([&] {
              seq_stages(o);
            }).find("the stages add up to over 2^40 steps"),
            std::string::npos);
}

TEST(StepSchedule, noise_options_take_the_run_shape_and_its_budget_in_tokens) {
  const scaling::BatchScheduleOptions s = noise_schedule_options(noise_options());
  EXPECT_EQ(s.seq, 32);
  EXPECT_EQ(s.micro_batch, 2);
  EXPECT_EQ(s.batch, 8);
  EXPECT_EQ(s.max_batch, kDefaultMaxBatchMultiple * 8);
  EXPECT_EQ(s.schedule.warmup_tokens, 3 * 8 * 32);
  EXPECT_EQ(s.schedule.total_tokens, 12 * 8 * 32);
  EXPECT_EQ(s.schedule.min_lr_ratio, 0.25);
  EXPECT_EQ(s.law_params.b_noise, 1000.0);
  TrainOptions capped = noise_options();
  capped.batch_schedule->max_batch = 20;
  EXPECT_EQ(noise_schedule_options(capped).max_batch, 20);
}

TEST(StepSchedule, noise_schedule_follows_its_controller_and_restores_from_its_record) {
  const scaling::BatchScheduleOptions s = noise_schedule_options(noise_options());
  scaling::BatchSchedule reference(s);
  StepSchedule plan{scaling::BatchSchedule(s), s.micro_batch};
  ASSERT_NE(plan.noise(), nullptr);
  EXPECT_EQ(plan.max_micro_steps(), s.max_batch / s.micro_batch);
  EXPECT_NE(plan.summary().find("surge law"), std::string::npos) << plan.summary();
  // B_simple of 200 tokens (below the 256 of the batch), then 2000: the batch grows once to 2000
  // tokens = 62 sequences (31 micro-batches of 64 tokens), rounded down
  const double b_simple[] = {200.0, 2000.0, 2000.0};
  int changes = 0;
  for (double b : b_simple) {
    const StepRun r = plan.next();
    const scaling::StepPlan p = reference.next();
    EXPECT_EQ(r.step, p.step);
    EXPECT_EQ(r.batch, p.batch);
    EXPECT_EQ(r.micro_steps, p.micro_batches);
    EXPECT_EQ(r.tokens, p.batch_tokens);
    EXPECT_EQ(r.tokens_end, p.tokens_end);
    EXPECT_EQ(r.lr, p.lr);
    const auto change = plan.observe(b);
    EXPECT_EQ(change.has_value(), reference.observe(b).has_value());
    if (change) {
      ++changes;
      EXPECT_EQ(change->batch, 62);
      EXPECT_NE(batch_change_line(*change, s).find("batch 8 -> 62 sequences"), std::string::npos)
          << batch_change_line(*change, s);
    }
  }
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(plan.next().batch, 62);
  const nlohmann::json state = {{"step", 3}, {"batch_schedule", plan.checkpoint_json()}};
  const std::optional<scaling::BatchSchedule> restored =
      noise_schedule_from_checkpoint(state, 3, "run");
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->state(), plan.noise()->state());
  EXPECT_EQ(scaling::to_json(restored->options()), scaling::to_json(s));
  EXPECT_NE(test::error_message<FormatError>([&] {
              noise_schedule_from_checkpoint(state, 4, "run");
            }).find("run: the batch schedule is at step 3 but the checkpoint at step 4"),
            std::string::npos);
  EXPECT_FALSE(noise_schedule_from_checkpoint({{"step", 3}}, 3, "run").has_value());
}

// Note [Length stages] under a noise schedule: stages are spans of tokens (stage 1: 3 steps of
// 256 = 768 tokens), the batch counts 32-token sequences and a stage-2 step runs its tokens as
// 64-token ones in the same micro-batches of 64 tokens; a batch change is reported in each step's
// own sequences; the record restores mid-stage; and what the schedule cannot keep is refused.
TEST(StepSchedule, noise_schedule_over_length_stages_spans_tokens) {
  TrainOptions o = noise_options();
  o.seq_schedule = "32:3,64:5";
  o.steps = 8;
  const std::vector<SeqStage> stages = seq_stages(o);
  check_noise_stages(o, stages);
  const scaling::BatchScheduleOptions s = noise_schedule_options(o);
  EXPECT_EQ(s.schedule.total_tokens, 8 * 256);
  StepSchedule plan{scaling::BatchSchedule(s), 2, stages};
  // B_simple 200 (no change), 600 (18 sequences of 32 = 576 tokens), then 2000 (62 of 32)
  struct Want {
    int64_t batch, micro_steps, tokens_end, seq;
    int stage;
  };
  const Want want[] = {{8, 4, 256, 32, 0},
                       {8, 4, 512, 32, 0},
                       {18, 9, 1088, 32, 0},  // starts at 512 < 768 tokens: still stage 1
                       {9, 9, 1664, 64, 1},   // starts at 1088: stage 2, 9 sequences of 64
                       {31, 31, 3648, 64, 1}};
  const double b_simple[] = {200.0, 600.0, 600.0, 2000.0, 2000.0};
  const int64_t changed_to[] = {0, 18, 0, 31, 0};  // in the next step's sequences
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_FALSE(plan.done()) << i;
    const StepRun r = plan.next();
    EXPECT_EQ(r.step, int64_t(i) + 1);
    EXPECT_EQ(r.batch, want[i].batch) << r.step;
    EXPECT_EQ(r.micro_steps, want[i].micro_steps) << r.step;
    EXPECT_EQ(r.tokens, r.batch * r.seq) << r.step;
    EXPECT_EQ(r.tokens_end, want[i].tokens_end) << r.step;
    EXPECT_EQ(r.seq, want[i].seq) << r.step;
    EXPECT_EQ(r.stage, want[i].stage) << r.step;
    const std::optional<scaling::BatchChange> c = plan.observe(b_simple[i]);
    EXPECT_EQ(c ? c->batch : 0, changed_to[i]) << r.step;
    if (c) {
      EXPECT_EQ(c->old_batch, r.batch) << r.step;  // the step that ran, in its sequences
    }
    if (i == 3) {  // mid-stage 2: the record restores the same steps
      const nlohmann::json state = {{"batch_schedule", plan.checkpoint_json()}};
      const std::optional<scaling::BatchSchedule> restored =
          noise_schedule_from_checkpoint(state, 4, "run");
      ASSERT_TRUE(restored.has_value());
      const StepRun a = plan.next(), b = StepSchedule(*restored, 2, stages).next();
      EXPECT_EQ(b.batch, a.batch);
      EXPECT_EQ(b.stage, a.stage);
      EXPECT_EQ(b.tokens_end, a.tokens_end);
      EXPECT_EQ(b.lr, a.lr);
    }
  }
  EXPECT_TRUE(plan.done());
  EXPECT_NE(plan.summary().find("(of 32 tokens, stage 1's length"), std::string::npos)
      << plan.summary();
  o.stage_batch = "sequences";
  EXPECT_NE(test::error_message<ConfigError>([&] {
              check_noise_stages(o, seq_stages(o));
            }).find("--batch-schedule noise with --stage-batch sequences"),
            std::string::npos);
  o.stage_batch = "tokens";
  o.seq_schedule = "32:3,64:2,256:1";  // 256-token sequences in micro-batches of 64 tokens
  EXPECT_NE(test::error_message<ConfigError>([&] { check_noise_stages(o, seq_stages(o)); })
                .find("stage 3's 256-token sequences are longer than a micro-batch's 64 tokens "
                      "(--micro-batch 2 x 32); the noise schedule grows the batch in "
                      "micro-batches of one size: use --micro-batch 8 or more"),
            std::string::npos);
}

// A noise-schedule step that starts exactly where a stage starts runs that stage's length.
TEST(StepSchedule, a_noise_step_starting_at_a_stage_boundary_runs_the_new_length) {
  TrainOptions o = noise_options();
  o.seq_schedule = "32:3,64:5";
  o.steps = 8;
  const std::vector<SeqStage> stages = seq_stages(o);
  StepSchedule plan{scaling::BatchSchedule(noise_schedule_options(o)), 2, stages};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(plan.next().stage, 0) << i;
    plan.observe(std::nullopt);  // no B_simple: the batch stays
  }
  const StepRun r = plan.next();  // starts at 768 tokens, stage 2's first
  EXPECT_EQ(r.stage, 1);
  EXPECT_EQ(r.seq, 64);
  EXPECT_EQ(r.batch, 4);
}

}  // namespace
}  // namespace memo
