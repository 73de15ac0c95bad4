// Implementation of data/shards.h: `memo tokenize`'s reader of documents, its shard writers and
// its manifest.
// Note [Resuming a tokenize run]
// Documents are numbered in input order and tokenised deterministically, so a run can restart at
// any document. After each shard is written, the manifest records per split (train, val): the
// shards written, the first document whose tokens are not all in them (its input file and byte
// offset) and how many of its tokens are. A rerun with the same tokenizer, inputs and options
// restarts reading at the earlier of the two documents, drops what each split already holds and
// writes the next shards; tokens that were only in memory when the run died are made again.
#include "memo/data/shards.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <set>

#include "memo/core/error.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "memo/io/crc32c.h"
#include "memo/io/json_file.h"
#include "memo/io/mapped_file.h"

namespace memo {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<ShardManifest> read_shard_manifest(const fs::path& dir) {
  const fs::path file = dir / kShardManifestFile;
  if (!fs::exists(file)) return std::nullopt;
  ShardManifest m;
  try {
    m.json = json::parse(read_file(file));
    const int version = m.json.at("version").is_number_integer() ? m.json["version"].get<int>() : 0;
    if (m.json.at("format") != kShardFormat || version < 1 || version > kShardFormatVersion)
      throw FormatError(str(file.string(), " is not a version 1 to ", kShardFormatVersion, " ",
                            kShardFormat, " manifest"));
    m.vocab_size = m.json.at("vocab_size").get<int64_t>();
    m.complete = m.json.at("complete").get<bool>();
    m.data_format = m.json.value("data_format", std::string(kShardTextFormat));
    if (m.data_format != kShardTextFormat && m.data_format != kShardPromptCompletionFormat)
      throw FormatError(str(file.string(), ": data_format \"", m.data_format,
                            "\" is neither \"text\" nor \"prompt-completion\""));
    m.end_of_text = m.json.value("end_of_text", -1);
    m.document_start = m.json.value("document_start", m.end_of_text);
    std::set<std::string> listed;
    // A shard's files are plain names in the folder, each listed once.
    auto file_name = [&](const std::string& name) {
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
        throw FormatError(
            str(file.string(), ": shard file \"", name, "\" is not a file name in the folder"));
      if (!listed.insert(name).second)
        throw FormatError(str(file.string(), ": shard file \"", name, "\" is listed twice"));
      return name;
    };
    for (const json& s : m.json.at("shards")) {
      ShardInfo& info = m.shards.emplace_back();
      info.file = file_name(s.at("file").get<std::string>());
      info.split = s.at("split").get<std::string>();
      if (info.split != "train" && info.split != "val")
        throw FormatError(str(file.string(), ": shard ", info.file, " has split \"", info.split,
                              "\", neither \"train\" nor \"val\""));
      info.tokens = s.at("tokens").get<int64_t>();
      if (info.tokens < 0)
        throw FormatError(
            str(file.string(), ": shard ", info.file, " has ", info.tokens, " tokens"));
      info.crc32c = s.at("crc32c").get<uint32_t>();
      if (s.contains("docs")) {
        info.docs = file_name(s.at("docs").get<std::string>());
        info.docs_crc32c = s.at("docs_crc32c").get<uint32_t>();
      }
      if (s.contains("mask")) {
        info.mask = file_name(s.at("mask").get<std::string>());
        info.mask_crc32c = s.at("mask_crc32c").get<uint32_t>();
      }
      if (m.data_format == kShardPromptCompletionFormat && (info.mask.empty() || info.docs.empty()))
        throw FormatError(str(file.string(), ": prompt-completion shard ", info.file,
                              " lists no .mask or .docs file"));
    }
  } catch (const json::exception& e) {
    throw FormatError(str(file.string(), " is not a valid shard manifest: ", e.what()));
  }
  return m;
}

fs::path shard_folder(const std::string& data_path) {
  std::error_code ec;
  fs::path dir(data_path);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

std::string shard_tokenizer_json(const std::string& data_path) {
  std::error_code ec;
  const fs::path dir = shard_folder(data_path);
  if (!fs::exists(dir / kShardManifestFile, ec) || !fs::exists(dir / kShardTokenizerFile, ec))
    return "";
  // The copy a checkpoint keeps must be the tokenizer the shards were written with: it parses,
  // and its checksum is the one the manifest records.
  const fs::path file = dir / kShardTokenizerFile;
  std::string text = read_file(file);
  check_json_depth<FormatError>(text, file.string());
  json parsed;
  try {
    parsed = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(str(file.string(), " is not valid JSON (", e.what(),
                          "): the shard folder is damaged; re-run `memo tokenize`"));
  }
  const std::optional<ShardManifest> m = read_shard_manifest(dir);
  const json run = m ? m->json.value("run", json()) : json();
  if (run.is_object() && run.contains("tokenizer_crc32c") &&
      run["tokenizer_crc32c"] != crc32c(0, parsed.dump()))
    throw FormatError(str(file.string(), " is not the tokenizer its shards were written with (its",
                          " checksum differs from the manifest's tokenizer_crc32c); re-run ",
                          "`memo tokenize`"));
  return text;
}

std::string shard_tokenizer_config(const std::string& data_path) {
  std::error_code ec;
  const fs::path dir = shard_folder(data_path);
  if (!fs::exists(dir / kShardManifestFile, ec) ||
      !fs::is_regular_file(dir / kShardTokenizerConfigFile, ec))
    return "";
  return read_file(dir / kShardTokenizerConfigFile);
}

namespace {

using Clock = std::chrono::steady_clock;

struct Input {
  fs::path path;
  int64_t bytes = 0;
  bool json_lines = false;
};

// A part of a prompt-completion example: text encoded as ordinary text, or a special token's
// id; the loss counts its tokens or not (Note [Loss mask files]).
struct ExamplePart {
  std::string text;
  int32_t special = -1;
  bool counted = false;
};

struct Document {
  std::string owned;                // JSON lines: the decoded text
  std::string_view text;            // plain text: a view of the mapped file
  std::vector<ExamplePart> pieces;  // a prompt-completion example (text and owned stay empty)
  bool counts_end = false;          // the loss counts the next document's end-of-text
  int64_t input = 0, offset = 0;    // where it starts: input index, byte offset
  int64_t index = 0;                // document number, in input order
  int64_t global_offset = 0;        // offset among all input bytes
};

// The chat tokens messages are rendered with (Note [Loss mask files]).
struct ChatTokens {
  enum class Style { none, chatml, llama3 } style = Style::none;
  int32_t start = -1;       // <|im_start|> or <|start_header_id|>
  int32_t end_header = -1;  // <|end_header_id|> (Llama 3)
  int32_t end = -1;         // <|im_end|> or <|eot_id|>
};

ChatTokens chat_tokens(const Tokenizer& t) {
  ChatTokens c;
  const auto im_start = t.special_id("<|im_start|>"), im_end = t.special_id("<|im_end|>");
  const auto header = t.special_id("<|start_header_id|>");
  const auto end_header = t.special_id("<|end_header_id|>"), eot = t.special_id("<|eot_id|>");
  if (im_start && im_end) {
    c = {ChatTokens::Style::chatml, *im_start, -1, *im_end};
  } else if (header && end_header && eot) {
    c = {ChatTokens::Style::llama3, *header, *end_header, *eot};
  }
  return c;
}

// The pieces of one prompt-completion line (Note [Loss mask files]).
class ExampleParser {
 public:
  ExampleParser(ChatTokens chat, std::string tokenizer) : chat_(chat), tokenizer_(tokenizer) {}

  void parse(const json& j, Document& d, const std::string& where) const {
    if (!j.is_object()) throw DataError(str(where, ": the JSON line is not an object"));
    if (j.contains("messages")) {
      if (j.contains("prompt") || j.contains("completion"))
        throw DataError(str(where, ": a line has \"messages\" or \"prompt\" and ",
                            "\"completion\", not both (which would be trained on?)"));
      return parse_messages(j["messages"], d, where);
    }
    if (!j.contains("prompt") || !j["prompt"].is_string() || !j.contains("completion") ||
        !j["completion"].is_string())
      throw DataError(str(where, ": a prompt-completion line needs the string fields \"prompt\" ",
                          "and \"completion\", or \"messages\""));
    d.pieces.push_back({j["prompt"].get<std::string>(), -1, false});
    d.pieces.push_back({j["completion"].get<std::string>(), -1, true});
    d.counts_end = true;
  }

 private:
  void parse_messages(const json& messages, Document& d, const std::string& where) const {
    if (chat_.style == ChatTokens::Style::none)
      throw ConfigError(str(where, ": \"messages\" need a tokenizer with chat tokens (ChatML's ",
                            "<|im_start|> and <|im_end|>, or Llama 3's <|start_header_id|>, ",
                            "<|end_header_id|> and <|eot_id|>); ", tokenizer_, " has neither"));
    if (!messages.is_array() || messages.empty())
      throw DataError(str(where, ": \"messages\" is not a non-empty list"));
    bool assistant = false;
    for (const json& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string())
        throw DataError(
            str(where, ": each message needs the string fields \"role\" and ", "\"content\""));
      const std::string role = m["role"].get<std::string>();
      const bool counted = role == "assistant";
      assistant |= counted;
      if (chat_.style == ChatTokens::Style::chatml) {
        d.pieces.push_back({"", chat_.start, false});
        d.pieces.push_back({role + "\n", -1, false});
        d.pieces.push_back({m["content"].get<std::string>(), -1, counted});
        d.pieces.push_back({"", chat_.end, counted});
        d.pieces.push_back({"\n", -1, false});
      } else {
        d.pieces.push_back({"", chat_.start, false});
        d.pieces.push_back({role, -1, false});
        d.pieces.push_back({"", chat_.end_header, false});
        d.pieces.push_back({"\n\n", -1, false});
        d.pieces.push_back({m["content"].get<std::string>(), -1, counted});
        d.pieces.push_back({"", chat_.end, counted});
      }
    }
    if (!assistant)
      throw DataError(str(where, ": the messages hold no \"assistant\" message, nothing the ",
                          "loss would count"));
  }

  ChatTokens chat_;
  std::string tokenizer_;
};

// The files of `inputs` (folders walked in name order). The --out folder, when it lies inside an
// input folder, is not an input: its shards and manifest are this run's output (a rerun or a
// resume would otherwise read them as documents and see "another run").
// A folder that `memo tokenize` wrote holds tokens, not text: read as text, its shards would be
// documents of binary noise (or its manifest a malformed JSON line).
void refuse_shard_folder(const fs::path& dir, const std::string& given) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kShardManifestFile, ec)) return;
  try {
    const json m = json::parse(read_file(dir / kShardManifestFile));
    if (!m.is_object() || m.value("format", "") != kShardFormat) return;
  } catch (const json::exception&) {
    return;
  }
  throw DataError(str("input ", given,
                      dir.string() == given ? "" : str(" holds ", dir.string(), ", which"),
                      " holds memo tokenize shards (", kShardManifestFile,
                      "): they are tokens already; train on them with --data ", dir.string()));
}

std::vector<Input> list_inputs(const std::vector<std::string>& inputs, const fs::path& out_dir) {
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(out_dir, ec);
  std::vector<Input> out;
  auto add = [&](const fs::path& p) {
    const std::string ext = p.extension().string();
    out.push_back({p, int64_t(fs::file_size(p)), ext == ".jsonl" || ext == ".json"});
  };
  for (const std::string& in : inputs) {
    const fs::path p(in);
    if (!fs::exists(p)) throw DataError(str("input ", in, " does not exist"));
    if (fs::is_directory(p)) {
      refuse_shard_folder(p, in);
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(p); it != fs::recursive_directory_iterator();
           ++it) {
        // the output folder, and hidden folders (.git of a cloned dataset repository, .cache)
        if (it->is_directory() &&
            (it->path().filename().string().starts_with(".") ||
             (!out_abs.empty() && fs::weakly_canonical(it->path(), ec) == out_abs))) {
          it.disable_recursion_pending();
          continue;
        }
        if (it->is_directory()) refuse_shard_folder(it->path(), in);
        if (it->is_regular_file() && !it->path().filename().string().starts_with("."))
          files.push_back(it->path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) add(f);
    } else {
      add(p);
    }
  }
  if (out.empty()) throw DataError("no input files (the folders given are empty)");
  return out;
}

// Where a split stands: see Note [Resuming a tokenize run].
struct SplitState {
  std::string name;
  int64_t shards = 0, tokens = 0;           // written
  int64_t resume_doc = 0, resume_skip = 0;  // first document not fully written; its written tokens
  int64_t resume_input = 0, resume_offset = 0;
  // prompt-completion: the mask bit the resume document's end-of-text took (its predecessor's
  // counts_end), and the bit the next document's end-of-text takes
  bool resume_end_counted = false, end_counted = false;
  std::vector<int32_t> pending;       // tokens not yet in a shard
  std::vector<uint8_t> pending_mask;  // prompt-completion: whether the loss counts each
  std::vector<int64_t> pending_docs;  // where pending documents start, among the split's tokens
};

// The bytes of a .docs or .mask file: its 16-byte header, then the body.
std::string sidecar_bytes(const char (&magic)[9], uint32_t count, const std::string& body) {
  std::string bytes(16, '\0');
  std::memcpy(bytes.data(), magic, 8);
  const uint32_t version = 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 12, &count, 4);
  return bytes + body;
}

class ShardWriter {
 public:
  ShardWriter(fs::path dir, int64_t shard_tokens, int token_bytes, bool masks, json& manifest)
      : dir_(std::move(dir)),
        shard_tokens_(shard_tokens),
        token_bytes_(token_bytes),
        masks_(masks),
        manifest_(manifest) {}

  // Writes pending tokens [0, count) as the split's next shard, with its .docs and .mask files
  // (written first: the manifest lists the shard once all three are there), and records it.
  void write(SplitState& s, int64_t count) {
    const std::string stem = str(s.name, "-", zero_pad(s.shards));
    const std::string name = stem + ".bin";
    json entry = {{"file", name}, {"split", s.name}, {"tokens", count}};
    std::string docs;
    size_t listed = 0;
    for (; listed < s.pending_docs.size() && s.pending_docs[listed] < s.tokens + count; ++listed) {
      const auto offset = uint32_t(s.pending_docs[listed] - s.tokens);
      docs.append(reinterpret_cast<const char*>(&offset), 4);
    }
    const std::string docs_bytes = sidecar_bytes("memodocs", uint32_t(listed), docs);
    write_file_atomic(dir_ / (stem + ".docs"), docs_bytes);
    entry["docs"] = stem + ".docs";
    entry["docs_crc32c"] = crc32c(0, docs_bytes);
    s.pending_docs.erase(s.pending_docs.begin(), s.pending_docs.begin() + int64_t(listed));
    if (masks_) {
      std::string bits(size_t((count + 7) / 8), '\0');
      for (int64_t i = 0; i < count; ++i)
        if (s.pending_mask[size_t(i)]) bits[size_t(i / 8)] |= char(1 << (i % 8));
      const std::string mask_bytes = sidecar_bytes("memomask", uint32_t(count), bits);
      write_file_atomic(dir_ / (stem + ".mask"), mask_bytes);
      entry["mask"] = stem + ".mask";
      entry["mask_crc32c"] = crc32c(0, mask_bytes);
      s.pending_mask.erase(s.pending_mask.begin(), s.pending_mask.begin() + count);
    }
    int32_t header[kLlmcHeaderInts] = {};
    header[0] = token_bytes_ == 2 ? kLlmcMagic : kLlmcMagicLlama3;
    header[1] = token_bytes_ == 2 ? kLlmcVersion : kLlmcVersionLlama3;
    header[2] = int32_t(count);
    std::string bytes(sizeof header + size_t(count) * size_t(token_bytes_), '\0');
    std::memcpy(bytes.data(), header, sizeof header);
    char* body = bytes.data() + sizeof header;
    for (int64_t i = 0; i < count; ++i) {
      const int32_t id = s.pending[size_t(i)];
      if (token_bytes_ == 2) {
        const auto v = uint16_t(id);
        std::memcpy(body + i * 2, &v, 2);
      } else {
        const auto v = uint32_t(id);
        std::memcpy(body + i * 4, &v, 4);
      }
    }
    write_file_atomic(dir_ / name, bytes);
    entry["crc32c"] = crc32c(0, bytes);
    manifest_["shards"].push_back(entry);
    s.pending.erase(s.pending.begin(), s.pending.begin() + count);
    s.shards += 1;
    s.tokens += count;
  }
  int64_t shard_tokens() const { return shard_tokens_; }

 private:
  static std::string zero_pad(int64_t n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(n));
    return buf;
  }
  fs::path dir_;
  int64_t shard_tokens_;
  int token_bytes_;
  bool masks_;
  json& manifest_;
};

json split_json(const SplitState& s) {
  return {{"shards", s.shards},
          {"tokens", s.tokens},
          {"resume_doc", s.resume_doc},
          {"resume_skip", s.resume_skip},
          {"resume_input", s.resume_input},
          {"resume_offset", s.resume_offset},
          {"resume_end_counted", s.resume_end_counted}};
}

void restore_split(SplitState& s, const json& j) {
  s.shards = j.at("shards");
  s.tokens = j.at("tokens");
  s.resume_doc = j.at("resume_doc");
  s.resume_skip = j.at("resume_skip");
  s.resume_input = j.at("resume_input");
  s.resume_offset = j.at("resume_offset");
  s.end_counted = s.resume_end_counted = j.at("resume_end_counted");
}

// Reads documents in order from (input, offset) on, up to about `batch_bytes` of text.
class DocumentReader {
 public:
  // examples: read prompt-completion lines (Note [Loss mask files]) instead of text.
  DocumentReader(const std::vector<Input>& inputs, int64_t input, int64_t offset, int64_t doc,
                 const ExampleParser* examples)
      : inputs_(inputs), input_(input), offset_(offset), next_doc_(doc), examples_(examples) {
    for (const Input& in : inputs) starts_.push_back(total_bytes_), total_bytes_ += in.bytes;
  }

  bool done() const { return input_ >= int64_t(inputs_.size()); }
  int64_t total_bytes() const { return total_bytes_; }
  int64_t global_position() const {
    return done() ? total_bytes_ : starts_[size_t(input_)] + offset_;
  }

  // The next batch of documents; the views stay valid until the next call.
  std::vector<Document>& next_batch(int64_t batch_bytes) {
    batch_.clear();
    batch_maps_.clear();
    int64_t bytes = 0;
    while (!done() && bytes < batch_bytes) {
      const Input& in = inputs_[size_t(input_)];
      if (!map_ || map_->path() != in.path) map_.emplace(in.path);
      const std::string_view all = map_->bytes();
      if (int64_t(all.size()) != in.bytes)
        throw DataError(str("input ", in.path.string(), " changed size during the run"));
      if (!in.json_lines && examples_)
        throw DataError(str(in.path.string(), " is plain text; --format prompt-completion reads ",
                            "JSON lines (*.jsonl, *.json) of examples"));
      if (!in.json_lines) {  // a plain text file is one document
        batch_.push_back(make_doc(all, {}));
        bytes += in.bytes;
        advance_file();
        continue;
      }
      size_t end = all.find('\n', size_t(offset_));
      if (end == std::string_view::npos) end = all.size();
      const std::string_view line = all.substr(size_t(offset_), end - size_t(offset_));
      const int64_t start = offset_;
      offset_ = int64_t(end) + 1;
      if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
        if (examples_) {
          batch_.push_back(make_doc({}, {}));
          examples_->parse(parse_line(line, in.path, start), batch_.back(),
                           str(in.path.string(), " at byte ", start));
          for (const ExamplePart& p : batch_.back().pieces) bytes += int64_t(p.text.size());
        } else {
          std::string text = parse_text(line, in.path, start);
          bytes += int64_t(text.size());
          batch_.push_back(make_doc({}, std::move(text)));
        }
        batch_.back().offset = start;
        batch_.back().global_offset = starts_[size_t(input_)] + start;
      }
      if (offset_ >= in.bytes) advance_file();
    }
    return batch_;
  }

 private:
  Document make_doc(std::string_view view, std::string owned) {
    Document d;
    d.owned = std::move(owned);
    d.text = view;
    d.input = input_;
    d.offset = offset_;
    d.index = next_doc_++;
    d.global_offset = starts_[size_t(input_)] + offset_;
    return d;
  }
  void advance_file() {
    ++input_;
    offset_ = 0;
    if (map_) batch_maps_.push_back(std::move(*map_));  // batch_ may still view it
    map_.reset();
  }
  static json parse_line(std::string_view line, const fs::path& path, int64_t offset) {
    try {
      return json::parse(line);
    } catch (const json::exception& e) {
      throw DataError(
          str(path.string(), " at byte ", offset, ": not a JSON line (", e.what(), ")"));
    }
  }
  std::string parse_text(std::string_view line, const fs::path& path, int64_t offset) const {
    json j = parse_line(line, path, offset);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw DataError(
          str(path.string(), " at byte ", offset, ": the JSON line has no string field \"text\""));
    return j["text"].get<std::string>();
  }

  const std::vector<Input>& inputs_;
  std::vector<int64_t> starts_;
  int64_t total_bytes_ = 0;
  int64_t input_, offset_, next_doc_;
  const ExampleParser* examples_;
  std::optional<MappedFile> map_;       // the input being read
  std::vector<MappedFile> batch_maps_;  // inputs finished during this batch, viewed by batch_
  std::vector<Document> batch_;
};

json run_description(const Tokenizer& t, const std::vector<Input>& inputs,
                     const TokenizeOptions& o) {
  json in = json::array();
  for (const Input& i : inputs)
    in.push_back({{"path", i.path.string()}, {"bytes", i.bytes}, {"json_lines", i.json_lines}});
  return {{"tokenizer", o.tokenizer},
          {"tokenizer_crc32c", crc32c(0, t.hf_json().dump())},
          {"inputs", in},
          {"shard_tokens", o.shard_tokens},
          {"val_fraction", o.val_fraction},
          {"format", o.format}};
}

std::string progress_line(int64_t done_bytes, int64_t total_bytes, double seconds,
                          int64_t run_bytes, int64_t docs, int64_t tokens) {
  const double mb_per_s = seconds > 0 ? double(run_bytes) / 1e6 / seconds : 0.0;
  const double eta = mb_per_s > 0 ? double(total_bytes - done_bytes) / 1e6 / mb_per_s : 0.0;
  char line[200];
  std::snprintf(line, sizeof line,
                "tokenize: %.1f / %.1f MB (%.0f%%), %.2f MB/s, ETA %.0f s, %lld documents, "
                "%lld tokens",
                double(done_bytes) / 1e6, double(total_bytes) / 1e6,
                total_bytes > 0 ? 100.0 * double(done_bytes) / double(total_bytes) : 100.0,
                mb_per_s, eta, static_cast<long long>(docs), static_cast<long long>(tokens));
  return line;
}

void check_options(const TokenizeOptions& o) {
  if (o.shard_tokens <= 0 || o.shard_tokens > std::numeric_limits<int32_t>::max())
    throw ConfigError(str("--shard-tokens ", o.shard_tokens, " must lie in [1, 2^31)"));
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    throw ConfigError(str("--val-fraction ", o.val_fraction, " must lie in [0, 1)"));
  if (o.inputs.empty()) throw ConfigError("no inputs: give text or JSON lines files or folders");
  if (o.format != kShardTextFormat && o.format != kShardPromptCompletionFormat)
    throw ConfigError(str("--format ", o.format, " is neither ", kShardTextFormat, " nor ",
                          kShardPromptCompletionFormat));
}

// The tokenizer, which must have an end-of-text token: it separates the documents.
Tokenizer load_tokenizer(const std::string& path) {
  Tokenizer tokenizer = Tokenizer::load(path);
  if (tokenizer.is_bytes() || !tokenizer.end_of_text())
    throw ConfigError(str("tokenizer ", path, " has no end-of-text token to separate documents ",
                          "(an added <|endoftext|> or <|end_of_text|>, tokenizer_config.json's ",
                          "eos_token, </s> or <eos>)"));
  return tokenizer;
}

// The token that starts each prompt-completion example: the end of text, unless that is a chat
// token (ChatML fine-tunes of Mistral or Llama 2 set eos_token to <|im_end|>), which would cut an
// example at each of its turns under document masks; then the first of the other end-of-text
// names the tokenizer has.
int32_t example_separator(const Tokenizer& t, const ChatTokens& chat, const std::string& path) {
  auto is_chat = [&](int32_t id) {
    return id == chat.start || id == chat.end_header || id == chat.end;
  };
  const int32_t eot = *t.end_of_text();
  if (!is_chat(eot)) return eot;
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    if (const std::optional<int32_t> id = t.special_id(name); id && !is_chat(*id)) return *id;
  throw ConfigError(str("tokenizer ", path, ": its end-of-text token ", eot,
                        " also ends each chat turn, so examples could not be told apart from ",
                        "their turns, and it has no other (<|endoftext|>, <|end_of_text|>, </s>, ",
                        "<eos>) to separate them"));
}

// The tokens around a document's text (Note [Document layout]): head, then the text's ids, then
// tail when it is >= 0.
struct DocumentFrame {
  std::vector<int32_t> head;
  int32_t tail = -1;
  int64_t size(size_t text_tokens) const {
    return int64_t(head.size()) + int64_t(text_tokens) + (tail >= 0 ? 1 : 0);
  }
};

// A new run's frame: BOS ... end-of-text where the tokenizer puts control tokens other than the
// end of text before a sequence and the documents are text; end-of-text ... otherwise.
DocumentFrame new_frame(const Tokenizer& t, int32_t eot, const std::string& data_format) {
  if (data_format != kShardTextFormat || t.document_start() == eot) return {{eot}, -1};
  return {std::vector<int32_t>(t.prefix_ids().begin(), t.prefix_ids().end()), eot};
}

// The frame of a manifest's documents: a run resumed continues in the layout it began with
// (one written before document_start has none: end-of-text ...).
DocumentFrame manifest_frame(const ShardManifest& m, const Tokenizer& t, const fs::path& dir) {
  if (m.document_start == m.end_of_text) return {{m.end_of_text}, -1};
  const std::span<const int32_t> bos = t.prefix_ids();
  if (bos.empty() || bos.front() != m.document_start)
    throw FormatError(str((dir / kShardManifestFile).string(), ": document_start ",
                          m.document_start, " is not the first token the tokenizer puts before ",
                          "a sequence"));
  return {std::vector<int32_t>(bos.begin(), bos.end()), m.end_of_text};
}

json new_manifest(const json& run, const Tokenizer& tokenizer, int32_t eot,
                  const DocumentFrame& frame, int token_bytes, const std::string& data_format) {
  return {{"format", kShardFormat},
          {"version", kShardFormatVersion},
          {"data_format", data_format},
          {"run", run},
          {"tokenizer_file", kShardTokenizerFile},
          {"vocab_size", tokenizer.vocab_size()},
          {"end_of_text", eot},
          {"document_start", frame.head.front()},
          {"token_bytes", token_bytes},
          {"complete", false},
          {"shards", json::array()}};
}

void check_same_run(const ShardManifest& old, const json& run, const std::string& out_dir) {
  if (old.json.at("run") != run)
    throw ConfigError(str(out_dir, " holds shards of another run (", kShardManifestFile,
                          " differs in tokenizer, inputs or options); use a new --out or ",
                          "delete it"));
}

TokenizeResult completed_result(const ShardManifest& old) {
  TokenizeResult result;
  result.already_complete = result.complete = true;
  result.train_tokens = old.json.at("train_tokens");
  result.val_tokens = old.json.at("val_tokens");
  result.documents = old.json.at("documents");
  result.text_bytes = old.json.at("text_bytes");
  result.shards = int64_t(old.shards.size());
  return result;
}

// A killed run may have left the temporary of the file it was writing (io/atomic_file.h).
void remove_temporaries(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos &&
        (name.starts_with("train-") || name.starts_with("val-") ||
         name.starts_with(kShardManifestFile) || name.starts_with(kShardTokenizerFile) ||
         name.starts_with(kShardTokenizerConfigFile)))
      fs::remove(e.path());
  }
}

// What a run writes into its folder: the two splits and the manifest that records them.
struct RunOutput {
  explicit RunOutput(fs::path out_dir) : dir(std::move(out_dir)) {
    train.name = "train";
    val.name = "val";
  }

  fs::path dir;
  json manifest;
  SplitState train, val;

  void resume_from(const json& old_manifest) {
    manifest = old_manifest;
    restore_split(train, manifest.at("train"));
    restore_split(val, manifest.at("val"));
  }
  void save_manifest() {
    manifest["train"] = split_json(train);
    manifest["val"] = split_json(val);
    write_file_atomic(dir / kShardManifestFile, manifest.dump(1));
  }
  // Tokens made so far, written or pending.
  int64_t tokens() const {
    return train.tokens + val.tokens + int64_t(train.pending.size()) + int64_t(val.pending.size());
  }
  // Writes each split's last, partial shard and records the run as complete.
  // Prompt-completion splits end with the end-of-text that ends their last example (eot >= 0).
  void finish(ShardWriter& writer, int64_t documents, int64_t text_bytes, int32_t eot) {
    for (SplitState* s : {&train, &val}) {
      if (eot >= 0 && s->tokens + int64_t(s->pending.size()) > 0) {
        s->pending.push_back(eot);
        s->pending_mask.push_back(s->end_counted);
      }
      if (!s->pending.empty()) writer.write(*s, int64_t(s->pending.size()));
    }
    train.resume_doc = val.resume_doc = documents;
    train.resume_skip = val.resume_skip = 0;
    manifest["complete"] = true;
    manifest["documents"] = documents;
    manifest["train_tokens"] = train.tokens;
    manifest["val_tokens"] = val.tokens;
    manifest["text_bytes"] = text_bytes;
    save_manifest();
  }
};

// Adds documents' tokens to their split and writes each shard they fill, recording after each
// where a rerun resumes (see Note [Resuming a tokenize run]).
struct ShardedSplits {
  ShardWriter& writer;
  RunOutput& out;
  int64_t val_start;  // offset among all input bytes where the val split starts
  DocumentFrame frame;
  bool masks;  // prompt-completion
  int64_t stop_after_shards;
  int64_t new_shards = 0;

  // False once stop_after_shards new shards are written. mask: under prompt-completion,
  // whether the loss counts each of ids (Note [Loss mask files]); else empty.
  bool add(const Document& d, const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
    SplitState& s = d.global_offset >= val_start ? out.val : out.train;
    if (d.index < s.resume_doc) return true;  // already in this split's shards
    // The document's tokens: the frame's head, its text's ids, the frame's tail; a resumed run
    // drops the first `skip`, which the shards before hold.
    const int64_t skip = d.index == s.resume_doc ? s.resume_skip : 0;
    const int64_t doc_tokens = frame.size(ids.size());
    const int64_t head = int64_t(frame.head.size());
    const bool eot_counted = s.end_counted;
    if (skip == 0) s.pending_docs.push_back(s.tokens + int64_t(s.pending.size()));
    for (int64_t i = skip; i < head; ++i) {
      s.pending.push_back(frame.head[size_t(i)]);
      if (masks) s.pending_mask.push_back(eot_counted);
    }
    const size_t from = std::min(size_t(std::max<int64_t>(skip - head, 0)), ids.size());
    s.pending.insert(s.pending.end(), ids.begin() + int64_t(from), ids.end());
    s.pending_mask.insert(s.pending_mask.end(), mask.begin() + int64_t(std::min(from, mask.size())),
                          mask.end());
    if (frame.tail >= 0 && skip < doc_tokens) s.pending.push_back(frame.tail);
    s.end_counted = d.counts_end;
    while (int64_t(s.pending.size()) >= writer.shard_tokens()) {
      writer.write(s, writer.shard_tokens());
      // What is left belongs to document d (a shard closes within the last document added).
      // A resumed run re-reads d and drops its first doc_tokens - left tokens (all of them
      // when the shard ended exactly with d).
      s.resume_doc = d.index;
      s.resume_skip = doc_tokens - int64_t(s.pending.size());
      s.resume_input = d.input;
      s.resume_offset = d.offset;
      s.resume_end_counted = eot_counted;
      out.save_manifest();
      if (++new_shards == stop_after_shards) return false;
    }
    return true;
  }
};

// Prints a progress line at most once a second, and after the last batch.
class ProgressMeter {
 public:
  ProgressMeter(std::ostream& progress, const DocumentReader& reader)
      : progress_(progress),
        start_position_(reader.global_position()),
        t0_(Clock::now()),
        last_print_(t0_) {}

  void update(const DocumentReader& reader, int64_t documents, const RunOutput& out) {
    const auto now = Clock::now();
    if (now - last_print_ > std::chrono::seconds(1) || reader.done()) {
      last_print_ = now;
      const double seconds = std::chrono::duration<double>(now - t0_).count();
      progress_ << progress_line(reader.global_position(), reader.total_bytes(), seconds,
                                 reader.global_position() - start_position_, documents,
                                 out.tokens())
                << "\n";
    }
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  std::ostream& progress_;
  int64_t start_position_;
  Clock::time_point t0_, last_print_;
};

// Reads, tokenises and shards the documents from the reader's position on; `documents` counts
// those read. False when the splits stopped the run early.
bool tokenize_documents(DocumentReader& reader, const Tokenizer& tokenizer, int64_t batch_bytes,
                        ShardedSplits& splits, int64_t& documents, ProgressMeter& meter) {
  while (!reader.done()) {
    std::vector<Document>& docs = reader.next_batch(batch_bytes);
    std::vector<std::string_view> texts;
    std::vector<TextStart> starts;
    for (const Document& d : docs) {
      if (!splits.masks) {
        texts.push_back(d.owned.empty() ? d.text : d.owned);
        starts.push_back(TextStart::sequence);
      }
      // An example's text pieces are encoded as the text they continue (Note [Loss mask files]).
      TextStart next = TextStart::sequence;
      for (const ExamplePart& p : d.pieces) {
        if (p.special >= 0) {
          next = TextStart::after_special;
        } else {
          texts.push_back(p.text);
          starts.push_back(next);
          if (!p.text.empty()) next = TextStart::continued;
        }
      }
    }
    const std::vector<std::vector<int32_t>> ids = tokenizer.encode_batch(texts, starts);
    size_t next = 0;
    std::vector<int32_t> example;
    std::vector<uint8_t> mask;
    for (Document& d : docs) {
      documents = d.index + 1;
      if (!splits.masks) {
        if (!splits.add(d, ids[next++], mask)) return false;
        continue;
      }
      example.clear();
      mask.clear();
      for (const ExamplePart& p : d.pieces) {
        if (p.special >= 0) {
          example.push_back(p.special);
        } else {
          example.insert(example.end(), ids[next].begin(), ids[next].end());
          ++next;
        }
        mask.resize(example.size(), p.counted);
      }
      if (!splits.add(d, example, mask)) return false;
    }
    meter.update(reader, documents, splits.out);
  }
  return true;
}

}  // namespace

TokenizeResult tokenize_corpus(const TokenizeOptions& o, std::ostream& progress) {
  check_options(o);
  const Tokenizer tokenizer = load_tokenizer(o.tokenizer);
  const ChatTokens chat = chat_tokens(tokenizer);
  const int32_t eot = o.format == kShardPromptCompletionFormat
                          ? example_separator(tokenizer, chat, o.tokenizer)
                          : *tokenizer.end_of_text();
  const std::vector<Input> inputs = list_inputs(o.inputs, fs::path(o.out_dir));
  RunOutput out{fs::path(o.out_dir)};
  fs::create_directories(out.dir);
  const int token_bytes = tokenizer.vocab_size() <= 65536 ? 2 : 4;

  const json run = run_description(tokenizer, inputs, o);
  DocumentFrame frame = new_frame(tokenizer, eot, o.format);
  out.manifest = new_manifest(run, tokenizer, eot, frame, token_bytes, o.format);
  const bool masks = o.format == kShardPromptCompletionFormat;
  TokenizeResult result;
  if (std::optional<ShardManifest> old = read_shard_manifest(out.dir)) {
    check_same_run(*old, run, o.out_dir);
    if (old->complete) return completed_result(*old);
    out.resume_from(old->json);
    frame = manifest_frame(*old, tokenizer, out.dir);
    result.resumed = true;
  }
  remove_temporaries(out.dir);
  write_file_atomic(out.dir / kShardTokenizerFile, tokenizer.hf_json().dump());
  {
    std::error_code ec;
    const fs::path given(o.tokenizer);
    const fs::path config =
        (fs::is_directory(given, ec) ? given : given.parent_path()) / kShardTokenizerConfigFile;
    if (fs::is_regular_file(config, ec))
      write_file_atomic(out.dir / kShardTokenizerConfigFile, read_file(config));
  }
  ShardWriter writer(out.dir, o.shard_tokens, token_bytes, masks, out.manifest);
  const ExampleParser examples(chat, o.tokenizer);

  // Resume at the earlier of the two splits' first unwritten documents.
  const SplitState& first = out.train.resume_doc <= out.val.resume_doc ? out.train : out.val;
  DocumentReader reader(inputs, first.resume_input, first.resume_offset, first.resume_doc,
                        masks ? &examples : nullptr);
  const int64_t total_bytes = reader.total_bytes();
  const int64_t val_start = o.val_fraction > 0
                                ? int64_t(double(total_bytes) * (1.0 - o.val_fraction))
                                : std::numeric_limits<int64_t>::max();
  if (result.resumed)
    progress << "tokenize: resuming " << o.out_dir << " at document " << first.resume_doc << " ("
             << out.train.shards << " train and " << out.val.shards << " val shards done)\n";
  ProgressMeter meter(progress, reader);
  ShardedSplits splits{writer, out, val_start, std::move(frame), masks, o.stop_after_shards};
  int64_t documents = first.resume_doc;
  if (!tokenize_documents(reader, tokenizer, o.batch_bytes, splits, documents, meter))
    return result;
  out.finish(writer, documents, total_bytes, masks ? eot : -1);
  result.complete = true;
  result.documents = documents;
  result.text_bytes = total_bytes;
  result.train_tokens = out.train.tokens;
  result.val_tokens = out.val.tokens;
  result.shards = out.train.shards + out.val.shards;
  result.seconds = meter.seconds();
  return result;
}

}  // namespace memo
