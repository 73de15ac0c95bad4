// The long-context evaluations of memo eval: the retrieval harness (train/retrieval.h) tested for
// what it computes (prompt length and key depth in tokens, the answer's parsing, the accuracy
// table from scripted answers right, wrong and malformed), and memo eval's --by-position and
// --passkey outputs on a tiny checkpoint (the buckets add up to the mean loss; one trial per cell;
// the SVGs are well formed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/data/tokenizer.h"
#include "memo/io/checkpoint.h"
#include "memo/train/retrieval.h"
#include "svg_check.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

TEST(Retrieval, prompts_have_the_length_asked_and_the_key_at_the_depth) {
  const Tokenizer bytes = Tokenizer::bytes();
  const RetrievalTask task = passkey_task(bytes);
  // bytes: one token each; "{key}" and a 5-digit key have the same length
  const int64_t fixed =
      int64_t(task.preamble.size() + task.question.size() + task.key_sentence.size());
  for (int64_t length : {fixed, fixed + 1, int64_t(1000), int64_t(4096)})
    for (double depth : {0.0, 0.25, 0.5, 1.0}) {
      const RetrievalPrompt p = retrieval_prompt(bytes, task, length, depth, "31415");
      ASSERT_EQ(int64_t(p.ids.size()), length);
      const int64_t filler = length - fixed;
      EXPECT_EQ(p.key_position, int64_t(task.preamble.size()) + std::llround(depth * filler));
      const std::string text = bytes.decode(p.ids);
      EXPECT_EQ(text.substr(size_t(p.key_position), 21), " The pass key is 3141");
      EXPECT_EQ(text.substr(0, 9), "There is ");
      EXPECT_EQ(text.substr(text.size() - task.question.size()), task.question);
    }
  const std::string msg = test::error_message<ConfigError>(
      [&] { retrieval_prompt(bytes, task, fixed - 1, 0.5, "31415"); });
  EXPECT_NE(msg.find("needs at least " + std::to_string(fixed) + " tokens"), std::string::npos)
      << msg;
}

// A tokenizer whose template puts a BOS before each sequence: the prompt begins with it, as
// memo generate's do, and still has the length asked for.
TEST(Retrieval, prompts_begin_with_the_tokenizers_bos) {
  const nlohmann::json tj = test::small_bos_tokenizer_json();
  const int32_t bos = tj["added_tokens"][1]["id"];  // <|fim|> as the BOS
  const Tokenizer tokenizer = Tokenizer::from_hf_json(tj, "bos");
  ASSERT_EQ(tokenizer.prefix_ids().size(), 1u);
  const RetrievalTask task = passkey_task(tokenizer);
  const RetrievalPrompt p = retrieval_prompt(tokenizer, task, 300, 0.5, "31415");
  ASSERT_EQ(p.ids.size(), 300u);
  EXPECT_EQ(p.ids[0], bos);
  EXPECT_EQ(std::count(p.ids.begin(), p.ids.end(), bos), 1);
  const std::vector<int32_t> pre = tokenizer.encode(task.preamble);
  EXPECT_TRUE(std::equal(pre.begin(), pre.end(), p.ids.begin() + 1));
  EXPECT_TRUE(test::small_tokenizer().prefix_ids().empty());
}

TEST(Retrieval, needle_cycles_the_haystack) {
  const Tokenizer bytes = Tokenizer::bytes();
  const RetrievalTask task = needle_task(bytes, "abc");
  const RetrievalPrompt p = retrieval_prompt(bytes, task, 200, 0.5, "1234567");
  const std::string text = bytes.decode(p.ids);
  EXPECT_EQ(text.substr(0, 6), "abcabc");
  EXPECT_NE(text.find(" The special magic number is 1234567."), std::string::npos);
  EXPECT_THROW(needle_task(bytes, ""), ConfigError);
}

TEST(Retrieval, answers_parse_to_their_first_digit_run) {
  EXPECT_EQ(parse_answer(" 12345. Remember it."), "12345");
  EXPECT_EQ(parse_answer("x 123 456"), "123");
  EXPECT_EQ(parse_answer("no digits at all"), "");
  EXPECT_EQ(parse_answer(""), "");
  const std::string key = retrieval_key(7, 3, 5);
  EXPECT_EQ(key.size(), 5u);
  EXPECT_NE(key[0], '0');
  EXPECT_NE(retrieval_key(7, 4, 5), key);
}

// A scripted model: right at depth 0, wrong (another number) at 0.5, malformed (no digits) at 1,
// and right at every depth of the longest length.
TEST(Retrieval, the_accuracy_table_counts_right_wrong_and_malformed_answers) {
  const Tokenizer bytes = Tokenizer::bytes();
  const RetrievalTask task = passkey_task(bytes);
  const RetrievalReport r = run_retrieval(
      bytes, task, {400, 800}, {0.0, 0.5, 1.0}, 3, 11, [&](std::span<const int32_t> prompt) {
        const std::string text = bytes.decode(prompt);
        const size_t at = text.find("The pass key is ") + 16;
        const std::string key = text.substr(at, 5);
        const double depth = double(at - 16 - task.preamble.size()) /
                             double(prompt.size() - task.preamble.size() - task.question.size() -
                                    task.key_sentence.size());
        if (prompt.size() == 800 || depth < 0.25) return " " + key + ". Remember";
        if (depth < 0.75) return std::string(" 99999.");
        return std::string(" the key, of course");
      });
  ASSERT_EQ(r.trials.size(), 2u * 3u * 3u);
  EXPECT_EQ(r.accuracy, (std::vector<std::vector<double>>{{1.0, 0.0, 0.0}, {1.0, 1.0, 1.0}}));
  EXPECT_EQ(r.trials[3].parsed, "99999");
  EXPECT_FALSE(r.trials[3].correct);
  EXPECT_EQ(r.trials[6].parsed, "");
  EXPECT_THROW(run_retrieval(bytes, task, {400}, {1.5}, 1, 0, {}), ConfigError);
}

class LongContextEval : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "config.json", test::kTinyLlamaConfig);
    test::write_text(dir / "data.txt", test::corpus(20000));
    const test::CommandResult r = test::run_command(
        test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
        dir.str("data.txt") + " --seq 64 --batch 4 --steps 3 --out " + dir.str("run") +
        " --document-mask --eot-id 73");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  test::TempDir dir;
};

TEST_F(LongContextEval, by_position_buckets_add_up_to_the_mean_loss) {
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " + dir.str("data.txt") +
      " --seq 100 --batches 2 --by-position 32 --document-mask --eot-id 73" + " --json --svg " +
      dir.str("pos.svg") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& b = j.at("by_position");
  ASSERT_EQ(b.size(), 4u);  // [0, 32), [32, 64), [64, 96), [96, 100)
  EXPECT_EQ(b[3]["from"], 96);
  EXPECT_EQ(b[3]["to"], 100);
  double sum = 0.0;
  int64_t tokens = 0;
  for (const nlohmann::json& k : b) {
    sum += k["loss"].get<double>() * k["tokens"].get<double>();
    tokens += k["tokens"].get<int64_t>();
  }
  EXPECT_EQ(tokens, j["tokens"].get<int64_t>());
  EXPECT_NEAR(sum / double(tokens), j["loss"].get<double>(), 1e-9);
  const test::SvgSummary svg = test::check_svg(test::file_bytes(dir / "pos.svg"));
  EXPECT_TRUE(svg.ok) << svg.error;
  EXPECT_EQ(svg.elements.at("circle"), 4);  // one point per bucket
  // --eod-mask-loss: the predictions from each 'I' (73) of the windows' inputs (the data's first
  // windows with --split all) leave the count
  const test::CommandResult m = test::run_command(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " + dir.str("data.txt") +
      " --split all --seq 100 --batches 2 --document-mask --eod-mask-loss --eot-id 73 --json " +
      "2>/dev/null");
  ASSERT_EQ(m.exit_code, 0) << m.output;
  const nlohmann::json jm = nlohmann::json::parse(m.output);
  const std::string text = test::file_bytes(dir / "data.txt");
  const int64_t inputs = jm["windows"].get<int64_t>() * 100;
  ASSERT_GT(jm["windows"].get<int64_t>(), 0);
  EXPECT_EQ(jm["tokens"].get<int64_t>(),
            inputs - std::count(text.begin(), text.begin() + inputs, 'I'));
  // and memo train names the flag that needs the token
  const test::CommandResult t =
      test::run_command(test::memo_bin() + " train --config " + dir.str("config.json") +
                        " --data " + dir.str("data.txt") + " --seq 64 --batch 4 --steps 1 --out " +
                        dir.str("x") + " --eod-mask-loss");
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.output.find("--eod-mask-loss: " + dir.str("data.txt") +
                          " has no tokenizer to name the token that starts each document; give "
                          "it with --eot-id N"),
            std::string::npos)
      << t.output;
}

// Every prediction masked (each input is the eot token under --eod-mask-loss) leaves no loss to
// report: an error, not a loss of 0 and a perplexity of 1. Zero and negative counts are refused.
TEST_F(LongContextEval, an_evaluation_that_counts_no_token_is_an_error_and_bad_counts_are_refused) {
  test::write_text(dir / "eot.txt", std::string(1000, 'I'));
  test::expect_clean_failure(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " + dir.str("eot.txt") +
          " --split all --seq 64 --eod-mask-loss --eot-id 73",
      "eot.txt: the 15 windows of 64 tokens evaluated count none of their targets");
  const std::string eval = test::memo_bin() + " eval --checkpoint " + dir.str("run");
  test::expect_clean_failure(eval + " --data " + dir.str("data.txt") + " --by-position 0",
                             "--by-position: must be above 0, got 0");
  test::expect_clean_failure(eval + " --data " + dir.str("data.txt") + " --eot-id -5",
                             "--eot-id: must be 0 or more, got -5");
  test::expect_clean_failure(eval + " --passkey --max-answer-tokens 0",
                             "--max-answer-tokens: must be above 0, got 0");
  test::expect_clean_failure(eval + " --passkey --prefill-chunk 0",
                             "--prefill-chunk: must be above 0, got 0");
  // one kind of evaluation's flags are refused by name in the other's, not ignored
  test::expect_clean_failure(eval + " --passkey --by-position 16",
                             "--by-position applies to the loss evaluation, not to --passkey");
  test::expect_clean_failure(eval + " --passkey --data " + dir.str("data.txt"),
                             "--data applies to the loss evaluation");
  test::expect_clean_failure(eval + " --data " + dir.str("data.txt") + " --lengths 1K",
                             "--lengths applies to --passkey and --needle");
  test::expect_clean_failure(eval + " --data " + dir.str("data.txt") + " --eot-id 3",
                             "--eot-id says where documents start");
  test::expect_clean_failure(eval + " --passkey --lengths 100,", "--lengths 100,: '' is not");
  test::expect_clean_failure(eval + " --passkey --depths 0.5,,1", "--depths 0.5,,1: '' is not");
  test::expect_clean_failure(eval + " --passkey --eot-id 3",
                             "--eot-id applies to the loss evaluation, not to --passkey");
  test::expect_clean_failure(
      test::memo_bin() + " generate --checkpoint " + dir.str("nowhere") + " --prompt a --eot-id 3",
      "--eot-id says where documents start for --document-mask");
  const std::string train = test::memo_bin() + " train --config " + dir.str("config.json") +
                            " --data " + dir.str("data.txt") + " --no-checkpoint";
  test::expect_clean_failure(train + " --document-mask --eot-id -5",
                             "--eot-id: must be 0 or more, got -5");
  test::expect_clean_failure(train + " --seq-schedule ''", "--seq-schedule: is empty");
  test::expect_clean_failure(train + " --seq-schedule 64:5,", "'' is not SEQ:STEPS");
  test::expect_clean_failure(train + " --eot-id 3", "--eot-id says where documents start");
  test::expect_clean_failure(train + " --stage-batch sequences",
                             "--stage-batch requires --seq-schedule");
}

// A base model asked past its context (the usual comparison with its extended run): refused with
// the way past it; --max-position-embeddings evaluates it as a config that says so would, and
// memo plan --config takes the run's folder and the same flag.
TEST_F(LongContextEval, position_flags_evaluate_and_plan_a_checkpoint_past_its_context) {
  const std::string eval = test::memo_bin() + " eval --checkpoint ";
  const std::string args =
      " --data " + dir.str("data.txt") + " --split all --seq 600 --batch 1 --batches 1 --json";
  test::expect_clean_failure(eval + dir.str("run") + args,
                             "--seq 600 exceeds max_position_embeddings = 512 of --checkpoint " +
                                 dir.str("run") + "; --max-position-embeddings N evaluates it");
  const test::CommandResult past =
      test::run_command(eval + dir.str("run") + args + " --max-position-embeddings 600");
  ASSERT_EQ(past.exit_code, 0) << past.output;
  // the same checkpoint whose config.json says 600 positions
  const fs::path from = find_latest_checkpoint(dir / "run");
  fs::copy(from, dir / "wide", fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(test::file_bytes(dir / "wide" / kConfigFile));
  config["max_position_embeddings"] = 600;
  test::write_text(dir / "wide" / kConfigFile, config.dump());
  const test::CommandResult wide = test::run_command(eval + dir.str("wide") + args);
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_EQ(nlohmann::json::parse(past.output).at("loss"),
            nlohmann::json::parse(wide.output).at("loss"));
  const std::string plan = test::memo_bin() + " plan --seq 600 --batch 1 --json --config ";
  test::expect_clean_failure(plan + dir.str("run"),
                             "--max-position-embeddings N (and a "
                             "--rope-scaling) plans the run that extends it");
  const test::CommandResult planned =
      test::run_command(plan + dir.str("run") + " --max-position-embeddings 600");
  const test::CommandResult planned_wide =
      test::run_command(plan + (dir / "wide" / kConfigFile).string());
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_EQ(nlohmann::json::parse(planned.output).at("plan_peak_bytes"),
            nlohmann::json::parse(planned_wide.output).at("plan_peak_bytes"));
}

TEST_F(LongContextEval, passkey_runs_every_length_depth_and_trial) {
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") +
      " --passkey --lengths 250,400 --depths 0,1 --trials 2 --prefill-chunk 64 --json --svg " +
      dir.str("pk.svg"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["task"], "passkey");
  EXPECT_EQ(j["trials"].size(), 2u * 2u * 2u);
  EXPECT_EQ(j["accuracy"].size(), 2u);
  const test::SvgSummary svg = test::check_svg(test::file_bytes(dir / "pk.svg"));
  EXPECT_TRUE(svg.ok) << svg.error;
  EXPECT_EQ(svg.elements.at("rect"), 2 * 2 + 2);  // the cells, the background and the frame
  const test::CommandResult too_long = test::run_command(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --passkey --lengths 1M");
  EXPECT_NE(too_long.exit_code, 0);
  EXPECT_NE(too_long.output.find("exceed the model's max_position_embeddings = 512"),
            std::string::npos)
      << too_long.output;
  // a length past 2^63 with the answer: refused, not wrapped round
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + dir.str("run") +
                                 " --passkey --lengths 300 --max-answer-tokens " +
                                 std::to_string(std::numeric_limits<int64_t>::max()),
                             "--lengths 300 and 9223372036854775807 answer tokens exceed the "
                             "model's max_position_embeddings = 512");
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + dir.str("run") +
                                 " --data " + dir.str("data.txt") + " --seq -5",
                             "--seq -5 must be positive");
}

TEST(Retrieval, an_answer_with_more_digits_than_the_key_is_wrong) {
  const Tokenizer bytes = Tokenizer::bytes();
  const RetrievalTask task = passkey_task(bytes);
  const std::string key = retrieval_key(7, 0, task.key_digits);
  const RetrievalReport r = run_retrieval(
      bytes, task, {400}, {0.5}, 1, 7, [&](std::span<const int32_t>) { return " " + key + "9."; });
  EXPECT_EQ(r.trials.at(0).parsed, key + "9");
  EXPECT_FALSE(r.trials.at(0).correct);
  EXPECT_EQ(r.accuracy[0][0], 0.0);
}

}  // namespace
}  // namespace memo
