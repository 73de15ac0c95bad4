// From text to a model and back through the memo command: tokenize into shards, train on them
// (the same losses as on the concatenated file), eval (perplexity, bits per byte), generate, plot,
// and the one-line errors of broken shard folders.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../parallel/mpi_launch.h"
#include "cli_test_util.h"
#include "data/small_tokenizer.h"
#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::losses;
using test::write_text;

// The command with its stderr dropped (run_command merges stderr into the output).
std::string quiet(const std::string& cmd) { return "{ " + cmd + " 2>/dev/null; }"; }

class TextCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir.str("tok.json"), test::small_tokenizer_json().dump());
    vocab_ = test::small_tokenizer().vocab_size();
    config(dir.str("config.json"), (vocab_ + 63) / 64 * 64);
    fs::create_directories(dir / "in");
    std::mt19937 rng(2);
    const char* words[] = {" the", " and", " of", " hello", "\n", " in", "ing", " that", " he"};
    for (int f = 0; f < 3; ++f) {
      std::string text;
      while (text.size() < 12000) text += words[rng() % 9];
      write_text(dir.str("in/part" + std::to_string(f) + ".txt"), text);
    }
  }
  void config(const std::string& path, int64_t vocab) const {
    write_text(path, nlohmann::json{{"hidden_size", 32},
                                    {"intermediate_size", 64},
                                    {"num_hidden_layers", 2},
                                    {"num_attention_heads", 4},
                                    {"num_key_value_heads", 2},
                                    {"vocab_size", vocab},
                                    {"max_position_embeddings", 128}}
                         .dump());
  }
  std::string tokenize_cmd(const std::string& extra = "") const {
    return test::memo_bin() + " tokenize --tokenizer " + dir.str("tok.json") + " --out " +
           dir.str("shards") + " --shard-tokens 2000 --val-fraction 0.4 " + extra + " " +
           dir.str("in");
  }
  test::CommandResult tokenize() const { return test::run_command(tokenize_cmd()); }
  std::string train_cmd(const std::string& data, const std::string& out,
                        const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " + data +
           " --seq 32 --batch 4 --steps 4 --lr 3e-3 --warmup 1 --out " + dir.str(out) + " --log " +
           dir.str(out + ".jsonl") + " " + extra + " 2>&1";
  }
  test::TempDir dir;
  int64_t vocab_ = 0;
};

// An --out folder inside an input folder is not an input: a rerun of the same command finds its
// own complete run, not "another run" made of its shards read as documents.
TEST_F(TextCli, an_out_folder_inside_the_inputs_is_not_read_as_input) {
  // nor is a hidden folder (a cloned dataset repository's .git)
  fs::create_directories(dir / "in" / ".git" / "objects");
  write_text(dir / "in" / ".git" / "objects" / "pack", "not text to train on");
  const std::string cmd = test::memo_bin() + " tokenize --tokenizer " + dir.str("tok.json") +
                          " --out " + dir.str("in/shards") + " --shard-tokens 2000 " +
                          dir.str("in") + " 2>&1";
  const test::CommandResult first = test::run_command(cmd);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string manifest = read_file(dir / "in" / "shards" / "manifest.json");
  EXPECT_EQ(manifest.find(".git"), std::string::npos) << manifest;
  const test::CommandResult again = test::run_command(cmd);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(read_file(dir / "in" / "shards" / "manifest.json"), manifest);
}

// Ids mean the text of the tokenizer that made them: data made by another tokenizer than the
// checkpoint's (or raw text, read as bytes) is refused by eval, --init-from and --val-data,
// naming the first id that differs; the checkpoint's own data passes.
TEST_F(TextCli, data_of_another_tokenizer_is_refused) {
  ASSERT_EQ(tokenize().exit_code, 0);
  const test::CommandResult a = test::run_command(train_cmd(dir.str("shards"), "a", "--steps 1"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // another tokenizer: the same, with two ids swapped
  nlohmann::json other = test::small_tokenizer_json();
  nlohmann::json& vocab = other["model"]["vocab"];
  std::string first, second;
  for (const auto& [k, v] : vocab.items()) {
    if (v == 1) first = k;
    if (v == 2) second = k;
  }
  vocab[first] = 2;
  vocab[second] = 1;
  write_text(dir.str("other.json"), other.dump());
  ASSERT_EQ(test::run_command(test::memo_bin() + " tokenize --tokenizer " + dir.str("other.json") +
                              " --out " + dir.str("other") + " " + dir.str("in"))
                .exit_code,
            0);
  const std::string eval =
      test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --seq 32 --batches 1 --data ";
  EXPECT_EQ(test::run_command(eval + dir.str("shards")).exit_code, 0);
  test::expect_clean_failure(eval + dir.str("other"),
                             "--data " + dir.str("other") +
                                 " was tokenised by another tokenizer than checkpoint " +
                                 dir.str("a") + "/step-00000001's: id 1 is ");
  // raw text is bytes: the small tokenizer's first 256 ids are the bytes in order, so it reads
  // them alike; the swapped one does not
  EXPECT_EQ(test::run_command(eval + dir.str("in/part0.txt")).exit_code, 0);
  ASSERT_EQ(test::run_command(train_cmd(dir.str("other"), "o", "--steps 1")).exit_code, 0);
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + dir.str("o") +
                                 " --seq 32 --batches 1 --data " + dir.str("in/part0.txt"),
                             " is raw text, read as bytes (id i is byte i): id 1 is \"\\x01\" "
                             "there");
  test::expect_clean_failure(test::memo_bin() + " train --init-from " + dir.str("a") + " --data " +
                                 dir.str("other") +
                                 " --seq 32 --batch 4 --steps 1 "
                                 "--out " +
                                 dir.str("b"),
                             "than --init-from " + dir.str("a") + "'s: id 1 is ");
  test::expect_clean_failure(train_cmd(dir.str("shards"), "c", "--val-data " + dir.str("other")),
                             "--val-data " + dir.str("other") +
                                 " was tokenised by another tokenizer than --data " +
                                 dir.str("shards") + "'s");
}

TEST_F(TextCli, sharded_training_equals_training_on_the_concatenated_file) {
  // a tokenizer_config.json beside the tokenizer travels with the shards into each checkpoint
  const std::string config = R"({"eos_token": "<|endoftext|>", "model_max_length": 2048})";
  write_text(dir.str("tokenizer_config.json"), config);
  const test::CommandResult t = tokenize();
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("MB/s, ETA"), std::string::npos) << t.output;
  // The same token streams as single llm.c files: the train shards joined, the val shards joined.
  const TokenData train = TokenData::load(dir / "shards", vocab_);
  const std::optional<TokenData> val = load_validation_shards(dir / "shards", vocab_);
  ASSERT_TRUE(val);
  ASSERT_GT(train.num_files(), 2);  // windows cross shard boundaries
  for (const auto& [data, file] : {std::pair{&train, "train.bin"}, std::pair{&*val, "val.bin"}}) {
    std::vector<int32_t> all(static_cast<size_t>(data->num_tokens()));
    data->copy(0, data->num_tokens(), all.data());
    write_llmc_tokens(dir / file, all);
  }
  const test::CommandResult a = test::run_command(train_cmd(dir.str("shards"), "a", ""));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const test::CommandResult b =
      test::run_command(train_cmd(dir.str("train.bin"), "b", "--val-data " + dir.str("val.bin")));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(losses(dir.str("a.jsonl")), losses(dir.str("b.jsonl")));
  EXPECT_EQ(losses(dir.str("a.jsonl")).size(), 4u);
  const auto val_line = [](const std::string& out) {
    return out.substr(out.find("validation loss"));
  };
  EXPECT_EQ(val_line(a.output).substr(0, 30), val_line(b.output).substr(0, 30));
  // the checkpoint carries the tokenizer; one trained on a lone file has none
  EXPECT_EQ(read_file(dir / "a" / "step-00000004" / "tokenizer.json"),
            read_file(dir / "shards" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(dir / "b" / "step-00000004" / "tokenizer.json"));
  EXPECT_EQ(read_file(dir / "shards" / "tokenizer_config.json"), config);
  EXPECT_EQ(read_file(dir / "a" / "step-00000004" / "tokenizer_config.json"), config);
  EXPECT_FALSE(fs::exists(dir / "b" / "step-00000004" / "tokenizer_config.json"));
  // a glob of the training shards is the same stream
  const test::CommandResult g = test::run_command(train_cmd(
      "'" + dir.str("shards") + "/train-*.bin'", "g", "--val-data " + dir.str("val.bin")));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(losses(dir.str("g.jsonl")), losses(dir.str("b.jsonl")));

  // eval: the validation shards by default; perplexity and bits per byte agree with the loss
  const test::CommandResult e =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " +
                              dir.str("shards") + " --seq 32"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const nlohmann::json j = nlohmann::json::parse(e.output);
  const double loss = j.at("loss"), tokens = j.at("tokens"), bytes = j.at("bytes");
  EXPECT_EQ(j.at("windows").get<int64_t>(), (val->num_tokens() - 1) / 32);  // every window
  EXPECT_NEAR(j.at("perplexity").get<double>(), std::exp(loss), 1e-9 * std::exp(loss));
  EXPECT_NEAR(j.at("bits_per_byte").get<double>(), loss * tokens / std::log(2.0) / bytes, 1e-9);
  EXPECT_GT(bytes, 2 * tokens);  // BPE tokens of this text hold several bytes each
  // --split all: the training and the validation shards
  const test::CommandResult all =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " +
                              dir.str("shards") + " --seq 32 --split all"));
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const nlohmann::json whole = nlohmann::json::parse(all.output);
  EXPECT_EQ(whole.at("windows").get<int64_t>(), (train.num_tokens() + val->num_tokens() - 1) / 32);
  // the bytes are the text's: the end-of-text targets (a control token) count none
  const Tokenizer tok = test::small_tokenizer();
  int64_t text_bytes = 0, boundaries = 0;
  for (int64_t i = 1; i <= whole.at("windows").get<int64_t>() * 32; ++i) {
    const int32_t id = i < train.num_tokens() ? train[i] : (*val)[i - train.num_tokens()];
    boundaries += tok.is_control(id);
    text_bytes += tok.is_control(id) ? 0 : int64_t(tok.token_bytes(id).size());
  }
  EXPECT_GT(boundaries, 0);
  EXPECT_EQ(whole.at("bytes").get<int64_t>(), text_bytes);
  // a checkpoint without a tokenizer (trained on a lone token file) still has a loss; no bits
  // per byte
  const test::CommandResult bare =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("b") + " --data " +
                              dir.str("val.bin") + " --seq 32 --split all"));
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  const nlohmann::json jb = nlohmann::json::parse(bare.output);
  EXPECT_GT(jb.at("loss").get<double>(), 0.0);
  EXPECT_TRUE(jb.at("bits_per_byte").is_null()) << bare.output;
  // a --batch past the data's windows is one batch of them all, not an allocation of its size
  const test::CommandResult wide =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("b") + " --data " +
                              dir.str("val.bin") + " --seq 32 --split all --batch 99999999999"));
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_EQ(nlohmann::json::parse(wide.output).at("loss"), jb.at("loss"));
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + dir.str("b") + " --data " +
                                 dir.str("val.bin") + " --batches -1",
                             "--batches: must be 0 or more, got -1");

  // generate: greedy text, the same streamed or not, with or without the KV cache
  const std::string gen = test::memo_bin() + " generate --checkpoint " + dir.str("a") +
                          " --prompt ' the' --max-new-tokens 30 --temperature 0";
  const test::CommandResult g1 = test::run_command(quiet(gen));
  ASSERT_EQ(g1.exit_code, 0) << g1.output;
  EXPECT_GT(g1.output.size(), 30u);  // 30 BPE tokens, several bytes each
  EXPECT_EQ(test::run_command(quiet(gen + " --stream")).output, g1.output);
  EXPECT_EQ(test::run_command(quiet(gen + " --no-kv-cache")).output, g1.output);
  const test::CommandResult s = test::run_command(
      test::memo_bin() + " generate --checkpoint " + dir.str("a") + " --prompt ' the' --seed 5 " +
      "--max-new-tokens 50 --top-k 20 --top-p 0.9 --temperature 0.8");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("tokens/s, KV cache"), std::string::npos) << s.output;

  // plot: both runs overlaid
  const test::CommandResult p =
      test::run_command(test::memo_bin() + " plot " + dir.str("a.jsonl") + " " +
                        dir.str("b.jsonl") + " --out " + dir.str("p.svg"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string svg = read_file(dir / "p.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find(">a</text>"), std::string::npos);
  EXPECT_NE(svg.find(">b</text>"), std::string::npos);
  // a line that is not a JSON object, or whose step is no number, is named
  write_text(dir / "bad.jsonl", "{\"step\": \"a\", \"loss\": 1}\n");
  test::expect_clean_failure(
      test::memo_bin() + " plot " + dir.str("bad.jsonl") + " --out " + dir.str("q.svg"),
      "bad.jsonl line 1: 'step' = \"a\" is not a number");
  write_text(dir / "text.jsonl", "In the beginning\n");
  test::expect_clean_failure(
      test::memo_bin() + " plot " + dir.str("text.jsonl") + " --out " + dir.str("q.svg"),
      "text.jsonl line 1 is not a JSON object: In the beginning");
}

// Prompt-completion data end to end (Note [Loss mask files], Note [Packed examples]): memo
// train runs on it, alone and over two pipeline stages with one process's losses, and memo
// eval's loss over the validation examples is the mean, computed here by running each example
// alone from the checkpoint's weights, over its completion's tokens and its end (the next
// end-of-text). (TrainStep's tests show a masked step's loss is the same whatever the micro-batch
// split and data-parallel layout.)
TEST_F(TextCli, prompt_completion_data_counts_the_completions_only) {
  const Tokenizer t = test::small_tokenizer();
  const int32_t eot = *t.end_of_text();
  std::mt19937 rng(3);
  const char* words[] = {" the", " and", " of", " hello", "\n", " in", "ing", " that", " he"};
  auto text = [&](size_t n) {
    std::string x;
    while (x.size() < n) x += words[rng() % 9];
    return x;
  };
  std::string lines;
  std::vector<int64_t> offsets;
  std::vector<std::pair<std::string, std::string>> examples;
  for (int i = 0; i < 60; ++i) {
    examples.emplace_back(text(10 + rng() % 40), text(5 + rng() % 25));
    offsets.push_back(int64_t(lines.size()));
    lines +=
        nlohmann::json{{"prompt", examples.back().first}, {"completion", examples.back().second}}
            .dump() +
        "\n";
  }
  write_text(dir.str("sft.jsonl"), lines);
  const test::CommandResult tok = test::run_command(
      test::memo_bin() + " tokenize --tokenizer " + dir.str("tok.json") + " --out " +
      dir.str("sft") + " --format prompt-completion --val-fraction 0.3 " + dir.str("sft.jsonl"));
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  const test::CommandResult a =
      test::run_command(train_cmd(dir.str("sft"), "a", "--steps 3 --micro-batch 2"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("examples packed whole into"), std::string::npos) << a.output;
  ASSERT_EQ(losses(dir.str("a.jsonl")).size(), 3u);
  // the same steps through two pipeline stages (Note [Pipeline step]): each micro-batch in flight
  // keeps its packed examples' masks and the last stage counts the targets one process counts,
  // so the first step's loss is one process's bit for bit and the later ones within the norm's
  // rounding (tests/parallel/pipeline_parallel_test.cc)
  const test::CommandResult p = test::run_command(
      test::mpirun(2) + train_cmd(dir.str("sft"), "p", "--steps 3 --micro-batch 2 --pp 2"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto one = losses(dir.str("a.jsonl")), pipe = losses(dir.str("p.jsonl"));
  ASSERT_EQ(pipe.size(), 3u);
  EXPECT_EQ(pipe.at(1), one.at(1));
  for (int64_t step : {2, 3})
    EXPECT_LT(test::relative(std::stod(pipe.at(step)), std::stod(one.at(step))), 1e-5) << step;
  test::expect_clean_failure(
      train_cmd(dir.str("in/part0.txt"), "mixed", "--val-data " + dir.str("sft")),
      "is text and the validation data " + dir.str("sft") + " (1 validation shards) is not");

  const test::CommandResult e =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " +
                              dir.str("sft") + " --seq 64"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const nlohmann::json j = nlohmann::json::parse(e.output);
  const LoadedCheckpoint ckpt = load_checkpoint(find_latest_checkpoint(dir / "a"));
  Model model(ckpt.config, cpu_backend());
  for (const ParamInfo& p : model.layout().params())
    ckpt.model.read_into(p.name, model.params() + p.offset, p.shape);
  CachingAllocator alloc;
  KeepStrategy keep(skeletal_layout(ckpt.config, DType::kF32), alloc);
  double sum = 0.0, sum_all = 0.0;
  int64_t counted = 0, counted_all = 0;
  const int64_t val_start = int64_t(double(lines.size()) * 0.7);
  int64_t val_examples = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const bool val = offsets[i] >= val_start;
    val_examples += val;
    std::vector<int32_t> in = {eot};
    t.encode(examples[i].first, in);
    const int64_t prompt = int64_t(in.size());
    t.encode(examples[i].second, in);
    ASSERT_LE(in.size(), 32u);  // whole in a window
    std::vector<int32_t> tgt(in.begin() + 1, in.end());
    tgt.push_back(eot);
    std::vector<float> token_losses(in.size());
    model.forward_loss(in.data(), tgt.data(), 1, int64_t(in.size()), keep, alloc, token_losses);
    for (size_t k = size_t(prompt - 1); k < in.size(); ++k) {
      sum_all += token_losses[k], ++counted_all;
      if (val) sum += token_losses[k], ++counted;
    }
  }
  EXPECT_EQ(j.at("tokens").get<int64_t>(), counted);
  EXPECT_LT(j.at("windows").get<int64_t>(), val_examples / 2);  // examples share windows
  EXPECT_NEAR(j.at("loss").get<double>(), sum / double(counted), 1e-5 * sum / double(counted));
  // --split all: the train split's examples, then the validation split's, each split closed by
  // its own end-of-text
  const test::CommandResult all =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " +
                              dir.str("sft") + " --seq 64 --split all"));
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const nlohmann::json ja = nlohmann::json::parse(all.output);
  EXPECT_EQ(ja.at("tokens").get<int64_t>(), counted_all);
  EXPECT_NEAR(ja.at("loss").get<double>(), sum_all / double(counted_all),
              1e-5 * sum_all / double(counted_all));
  // the examples are packed at their end-of-text: a mask cut at another token is refused
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " +
                                 dir.str("sft") + " --seq 64 --eot-id 10",
                             "(their manifest's end_of_text); give that, or leave --eot-id out");
}

// A Llama-style tokenizer (a BOS template) lays documents out as BOS ... end-of-text (Note
// [Document layout]): training restarts documents at the BOS and --eod-mask-loss leaves out the
// predictions made from the end of text, in memo train and memo eval alike.
TEST_F(TextCli, a_bos_tokenizers_documents_start_at_the_bos_and_end_at_the_end_of_text) {
  write_text(dir.str("bos.json"), test::small_bos_tokenizer_json().dump());
  const Tokenizer t = Tokenizer::load(dir / "bos.json");
  const int32_t bos = t.prefix_ids()[0], eot = *t.end_of_text();
  ASSERT_EQ(test::run_command(test::memo_bin() + " tokenize --tokenizer " + dir.str("bos.json") +
                              " --out " + dir.str("bos") + " " + dir.str("in"))
                .exit_code,
            0);
  const test::CommandResult a = test::run_command(
      train_cmd(dir.str("bos"), "a", "--steps 1 --document-mask --eod-mask-loss"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(
      a.output.find(str("memo: documents: attention and positions restart at each token ", bos,
                        "; the loss leaves out the predictions made from token ", eot, "\n")),
      std::string::npos)
      << a.output;
  // eval counts every prediction of its windows but those made from the end of text
  const test::CommandResult e = test::run_command(
      quiet(test::memo_bin() + " eval --checkpoint " + dir.str("a") + " --data " + dir.str("bos") +
            " --split all --seq 32 --batches 300 --eod-mask-loss --json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const nlohmann::json j = nlohmann::json::parse(e.output);
  const int64_t inputs = j["windows"].get<int64_t>() * 32;
  const TokenData d = TokenData::load(dir / "bos", vocab_);
  std::vector<int32_t> ids(static_cast<size_t>(inputs));
  d.copy(0, inputs, ids.data());
  // the windows hold a different number of each, so that the count tells which was left out
  ASSERT_GT(std::count(ids.begin(), ids.end(), eot), 0);
  ASSERT_NE(std::count(ids.begin(), ids.end(), bos), std::count(ids.begin(), ids.end(), eot));
  EXPECT_EQ(j["tokens"].get<int64_t>(), inputs - std::count(ids.begin(), ids.end(), eot));
}

TEST_F(TextCli, killed_tokenize_resumes_to_the_files_of_an_uninterrupted_run) {
  // 30 MB of JSON lines, so the run is still going when the kill comes.
  std::mt19937 rng(3);
  const char* words[] = {" the", " and", " of", " hello", "\n", " in", "ing", " that", " he"};
  std::string jsonl;
  while (jsonl.size() < 30'000'000) {
    std::string text;
    while (text.size() < 2000) text += words[rng() % 9];
    jsonl += nlohmann::json{{"text", text}}.dump() + "\n";
  }
  write_text(dir.str("big.jsonl"), jsonl);
  const std::string base = test::memo_bin() + " tokenize --tokenizer " + dir.str("tok.json") +
                           " --shard-tokens 300000 --val-fraction 0.1 " + dir.str("big.jsonl") +
                           " --out ";
  ASSERT_EQ(test::run_command(base + dir.str("whole")).exit_code, 0);
  // SIGKILL once the manifest lists a third training shard, then run the same command again.
  const std::string kill = "(" + base + dir.str("cut") + " > /dev/null 2>&1 & pid=$!; " +
                           "while ! grep -q train-000002 " + dir.str("cut/manifest.json") +
                           " 2>/dev/null; do sleep 0.005; done; kill -9 $pid; wait $pid; true)";
  ASSERT_EQ(test::run_command(kill).exit_code, 0);
  ASSERT_NE(read_file(dir / "cut" / "manifest.json").find("\"complete\": false"), std::string::npos)
      << "the run ended before it was killed";
  const test::CommandResult r = test::run_command(base + dir.str("cut"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenize: resuming"), std::string::npos) << r.output;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "whole")) {
    const std::string name = e.path().filename().string();
    if (name == "manifest.json") continue;
    ++files;
    EXPECT_EQ(read_file(e.path()), read_file(dir / "cut" / name)) << name;
  }
  EXPECT_GT(files, 10u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "whole"), fs::directory_iterator{}),
            std::distance(fs::directory_iterator(dir / "cut"), fs::directory_iterator{}));
}

TEST_F(TextCli, broken_shard_folders_fail_with_one_line_naming_the_file) {
  ASSERT_EQ(tokenize().exit_code, 0);
  config(dir.str("small.json"), 256);
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("small.json") +
                                 " --data " + dir.str("shards") + " --seq 32 --steps 1 --out " +
                                 dir.str("x"),
                             "but the model's vocab_size is 256");
  const fs::path shard = dir / "shards" / "train-000001.bin";
  const std::string bytes = read_file(shard);
  write_file_atomic(shard, bytes.substr(0, bytes.size() - 2));
  test::expect_clean_failure(train_cmd(dir.str("shards"), "x", ""),
                             shard.string() + ": llm.c header counts");
  fs::remove(shard);
  test::expect_clean_failure(train_cmd(dir.str("shards"), "x", ""),
                             "shard file " + shard.string() + " listed in");
  test::expect_clean_failure(tokenize_cmd("--shard-tokens 99"), "holds shards of another run");
}

// memo sweep holds out what memo train and memo eval hold out: a shard folder's validation shards
// (it validated on the tail of the training shards, and trained without it, before they shared
// train/run_data.h). The same runs on the joined shards with --val-data give the same lines, and
// so does --val-data naming the shard folder.
TEST_F(TextCli, sweep_validates_on_the_validation_shards) {
  const test::CommandResult t = tokenize();
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const TokenData train = TokenData::load(dir / "shards", vocab_);
  const std::optional<TokenData> val = load_validation_shards(dir / "shards", vocab_);
  ASSERT_TRUE(val);
  for (const auto& [data, file] : {std::pair{&train, "train.bin"}, std::pair{&*val, "val.bin"}}) {
    std::vector<int32_t> all(static_cast<size_t>(data->num_tokens()));
    data->copy(0, data->num_tokens(), all.data());
    write_llmc_tokens(dir / file, all);
  }
  const auto sweep = [&](const std::string& data, const std::string& out) {
    const test::CommandResult r = test::run_command(
        test::memo_bin() + " sweep --config " + dir.str("config.json") + " --data " + data +
        " --seq 32 --micro-batch 2 --batches 128 --steps 3 --val-windows 8 --lrs 3e-3 --out " +
        dir.str(out) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(read_file(dir / out));
  };
  const nlohmann::json shards = sweep(dir.str("shards"), "shards.jsonl");
  const nlohmann::json files =
      sweep(dir.str("train.bin") + " --val-data " + dir.str("val.bin"), "files.jsonl");
  ASSERT_TRUE(shards.at("val_loss").is_number()) << shards.dump();
  EXPECT_EQ(shards.at("val_loss"), files.at("val_loss"));
  EXPECT_EQ(shards.at("curve"), files.at("curve"));  // trained on every training shard
  // a shard folder given as --val-data gives its validation shards, not its training ones
  const nlohmann::json folder =
      sweep(dir.str("train.bin") + " --val-data " + dir.str("shards"), "folder.jsonl");
  EXPECT_EQ(folder.at("val_loss"), files.at("val_loss"));
}

TEST_F(TextCli, byte_models_generate_without_a_tokenizer_file) {
  config(dir.str("bytes.json"), 256);
  write_text(dir.str("kjv.txt"), test::corpus(5000));
  auto train = [&](const char* config, const char* data, const char* out, int batch, int steps) {
    return test::run_command(test::memo_bin() + " train --config " + dir.str(config) + " --data " +
                             dir.str(data) + " --seq 32 --batch " + std::to_string(batch) +
                             " --steps " + std::to_string(steps) + " --out " + dir.str(out));
  };
  const test::CommandResult t = train("bytes.json", "kjv.txt", "run", 4, 2);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const test::CommandResult g =
      test::run_command(quiet(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                              " --prompt 'In the' --max-new-tokens 10 --temperature 0"));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.size(), 11u);  // 10 bytes and a newline
  test::expect_clean_failure(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                                 " --prompt x --max-new-tokens 500",
                             "exceed the model's 128 positions; use --max-new-tokens <= 128");
  // the last new token is never fed back: a prompt of one token and 128 new ones fill 128
  // positions; a count near 2^63 is refused, not overflowed
  EXPECT_EQ(test::run_command(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                              " --prompt x --max-new-tokens 128 --temperature 0")
                .exit_code,
            0);
  test::expect_clean_failure(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                                 " --prompt x --max-new-tokens 9223372036854775807",
                             "use --max-new-tokens <= 128");
  // a prompt that alone is too long says so, not a negative --max-new-tokens
  test::expect_clean_failure(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                                 " --prompt " + std::string(200, 'a') + " --max-new-tokens 0",
                             "the prompt's 200 tokens exceed the model's 128 positions; give a "
                             "prompt of at most 128 tokens");
  // the validation split shorter than a window: refused before step 1, not after the last
  write_text(dir.str("short.txt"), test::corpus(300));
  const test::CommandResult v = train("bytes.json", "short.txt", "short", 2, 3);
  EXPECT_NE(v.exit_code, 0);
  EXPECT_NE(v.output.find("the validation data: "), std::string::npos) << v.output;
  EXPECT_EQ(v.output.find("step 1/"), std::string::npos) << v.output;

  // a byte vocabulary padded past 256 (to a multiple of 32 here): its checkpoint says it was
  // trained on bytes, so eval and generate take it; generation never draws an id above 255
  config(dir.str("padded.json"), 288);
  const test::CommandResult p = train("padded.json", "kjv.txt", "padded", 4, 2);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const test::CommandResult pg =
      test::run_command(quiet(test::memo_bin() + " generate --checkpoint " + dir.str("padded") +
                              " --prompt 'In the' --max-new-tokens 20 --temperature 2 --seed 3"));
  ASSERT_EQ(pg.exit_code, 0) << pg.output;
  EXPECT_EQ(pg.output.size(), 21u);  // 20 bytes and a newline
  const test::CommandResult pe =
      test::run_command(quiet(test::memo_bin() + " eval --checkpoint " + dir.str("padded") +
                              " --data " + dir.str("kjv.txt") + " --seq 32 --batch 2 --batches 2"));
  ASSERT_EQ(pe.exit_code, 0) << pe.output;
  EXPECT_NE(pe.output.find("\"loss\""), std::string::npos) << pe.output;
  // without that record, a vocabulary other than 256 is not taken for bytes
  const fs::path state = fs::path(dir.str("padded")) / "step-00000002" / kTrainerStateFile;
  nlohmann::json j = nlohmann::json::parse(test::file_bytes(state));
  EXPECT_EQ(j.at(kDataTokenizerKey), "bytes");
  j.erase(kDataTokenizerKey);
  write_text(state.string(), j.dump());
  test::expect_clean_failure(test::memo_bin() + " generate --checkpoint " + dir.str("padded") +
                                 " --prompt x --max-new-tokens 2",
                             "has no tokenizer.json and its vocab_size 288");
}

}  // namespace
}  // namespace memo
