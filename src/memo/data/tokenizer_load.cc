// Reading tokenizers (data/tokenizer.h): GPT-2's encoder.json + vocab.bpe, and Hugging Face's
// tokenizer.json with the tokenizer_config.json beside it. Each part of a tokenizer.json memo
// does not implement is refused by name, in one line, before any text is encoded.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/data/byte_level.h"
#include "memo/data/tokenizer.h"
#include "memo/data/tokenizer_impl.h"
#include "memo/io/atomic_file.h"
#include "memo/io/json_file.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json parse_json(std::string_view text, const std::string& source) {
  check_json_depth<FormatError>(text, source);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(str(source, " is not valid JSON: ", e.what()));
  }
}

// A token id as written in a tokenizer file: an integer in [0, 2^31).
int32_t json_token_id(const json& v, const std::string& source, std::string_view what) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    throw FormatError(str(source, ": the id of ", what, " is ", json_excerpt(v, 40),
                          ", not a token id (an integer from 0 to 2^31 - 1)"));
  return v.get<int32_t>();
}

}  // namespace

void Tokenizer::Impl::set_token(int32_t id, std::string bytes) {
  if (id < 0) throw FormatError(str(source, ": token id ", id, " is negative"));
  if (int64_t(id) >= id_limit)
    throw FormatError(str(source, ": token id ", id, " is far beyond the ", id_limit - kIdSlack,
                          " tokens the file defines (ids are counted from 0)"));
  if (size_t(id) >= token_bytes.size()) {
    token_bytes.resize(size_t(id) + 1);
    defined.resize(size_t(id) + 1, 0);
  }
  token_bytes[size_t(id)] = std::move(bytes);
  defined[size_t(id)] = 1;
}

// Byte-level vocabulary (spelling -> id) into token_bytes, id_of_bytes and byte_id.
void Tokenizer::Impl::set_vocab(const json& vocab, const std::vector<std::string>& skip) {
  if (!vocab.is_object()) throw FormatError(str(source, ": the vocabulary is not a JSON object"));
  byte_id.fill(-1);
  for (const auto& [spelling, id_json] : vocab.items()) {
    if (std::find(skip.begin(), skip.end(), spelling) != skip.end()) continue;
    std::optional<std::string> raw = byte_level_decode(spelling);
    if (!raw)
      throw FormatError(str(source, ": vocabulary entry \"", spelling,
                            "\" is not spelled in GPT-2's byte-level alphabet"));
    const int32_t id = json_token_id(id_json, source, str("vocabulary entry \"", spelling, "\""));
    if (raw->size() == 1) byte_id[static_cast<unsigned char>((*raw)[0])] = id;
    id_of_bytes.emplace(*raw, id);
    set_token(id, std::move(*raw));
  }
  for (int b = 0; b < 256; ++b)
    if (byte_id[size_t(b)] < 0)
      throw FormatError(str(source, ": the vocabulary has no token for byte ", b,
                            "; byte-level BPE needs all 256"));
}

void Tokenizer::Impl::add_merge(const std::string& left, const std::string& right, int32_t rank) {
  auto bytes_of = [&](const std::string& spelling) {
    if (!byte_level) return spelling;  // SentencePiece-style: the spellings are the tokens
    std::optional<std::string> raw = byte_level_decode(spelling);
    if (!raw)
      throw FormatError(str(source, ": merge ", rank, " (\"", left, " ", right, "\") has \"",
                            spelling, "\", not in the byte-level alphabet"));
    return *raw;
  };
  const std::string a = bytes_of(left), b = bytes_of(right);
  auto ia = id_of_bytes.find(a), ib = id_of_bytes.find(b), iab = id_of_bytes.find(a + b);
  if (ia == id_of_bytes.end() || ib == id_of_bytes.end() || iab == id_of_bytes.end())
    throw FormatError(str(source, ": merge ", rank, " (\"", left, " ", right,
                          "\") names a token missing from the vocabulary"));
  merges.insert(ia->second, ib->second, rank, iab->second);
}

void Tokenizer::Impl::add_special(std::string content, int32_t id, bool is_control,
                                  bool normalized) {
  set_token(id, content);
  if (is_control) mark_control(id);
  added.push_back({AddedToken{content, id}, is_control, normalized});
  specials.emplace_back(std::move(content), id);
}

void Tokenizer::Impl::mark_control(int32_t id) {
  if (control.size() <= size_t(id)) control.resize(size_t(id) + 1, false);
  control[size_t(id)] = true;
}

void Tokenizer::Impl::finish_specials() {
  std::stable_sort(specials.begin(), specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  // A normalized token is found in normalized text by its normalized string (Hugging Face
  // normalizes it as a text of its own: Llama 2's Prepend puts U+2581 before it too).
  std::vector<AddedToken> document[2], prompt[2];
  for (const AddedTokenSpec& spec : added) {
    AddedToken t = spec.token;
    if (spec.normalized && !normalizer.empty()) t.content = normalizer.normalize(t.content);
    if (!spec.control) document[spec.normalized].push_back(t);
    prompt[spec.normalized].push_back(std::move(t));
  }
  document_raw = AddedTokenMatcher(document[0]);
  document_normalized = AddedTokenMatcher(document[1]);
  prompt_raw = AddedTokenMatcher(prompt[0]);
  prompt_normalized = AddedTokenMatcher(prompt[1]);
}

// SentencePiece-style vocabulary: spellings are the tokens' strings ("▁the", "<0x0A>").
void Tokenizer::Impl::set_vocab_spellings(const json& vocab) {
  if (!vocab.is_object()) throw FormatError(str(source, ": the vocabulary is not a JSON object"));
  byte_id.fill(-1);
  char fallback[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(fallback, sizeof fallback, "<0x%02X>", b);
    auto it = vocab.find(fallback);
    if (it != vocab.end()) byte_id[size_t(b)] = json_token_id(*it, source, fallback);
  }
  for (const auto& [spelling, id_json] : vocab.items()) {
    const int32_t id = json_token_id(id_json, source, str("vocabulary entry \"", spelling, "\""));
    id_of_bytes.emplace(spelling, id);
    set_token(id, spelling);
  }
}

void Tokenizer::Impl::finish_decoding(const std::vector<std::string>& spellings) {
  if (concat_decode) return;
  spelling = spellings;
  spelling.resize(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (defined[id]) token_bytes[id] = decoder.decode({spelling[id]}, false);
}

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(read_file(path / "encoder.json"), read_file(path / "vocab.bpe"),
                             path.string());
    if (fs::exists(path / "tokenizer.json")) return load(path / "tokenizer.json");
    throw DataError(str("tokenizer directory ", path.string(),
                        " has neither encoder.json + vocab.bpe (GPT-2) nor tokenizer.json"));
  }
  const std::string p = path.string();
  json config = nullptr;  // tokenizer_config.json beside the file, when there is one
  const fs::path config_path = path.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec))
    config = parse_json(read_file(config_path), config_path.string());
  return from_hf_json(parse_json(read_file(path), p), p, config);
}

Tokenizer Tokenizer::from_gpt2_files(std::string_view encoder_json, std::string_view vocab_bpe,
                                     const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  const std::string kEndOfText = "<|endoftext|>";
  const json encoder = parse_json(encoder_json, source + "/encoder.json");
  impl->id_limit = int64_t(encoder.size()) + kIdSlack;
  impl->set_vocab(encoder, {kEndOfText});
  if (encoder.contains(kEndOfText))
    impl->add_special(kEndOfText, json_token_id(encoder[kEndOfText], source, "<|endoftext|>"));
  impl->finish_specials();
  // vocab.bpe: a "#version" line, then one "left right" merge per line in rank order.
  json merges = json::array();
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t line_start = 0;
  while (line_start < vocab_bpe.size()) {
    size_t line_end = vocab_bpe.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(line_start, line_end - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line_start = line_end + 1;
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      throw FormatError(str(source, "/vocab.bpe: line \"", line, "\" is not \"left right\""));
    pairs.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  impl->merges.reserve(pairs.size());
  for (size_t r = 0; r < pairs.size(); ++r) {
    impl->add_merge(pairs[r].first, pairs[r].second, int32_t(r));
    merges.push_back(pairs[r].first + " " + pairs[r].second);
  }
  impl->pre.pattern.emplace(std::string(kGpt2SplitPattern));
  // The same tokenizer as Hugging Face's GPT-2 tokenizer.json, so checkpoints carry one format.
  json added = json::array();
  for (const auto& [content, id] : impl->specials)
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", true},
                     {"special", true}});
  impl->hf = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"post_processor",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", false},
                {"use_regex", true}}},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", encoder},
                {"merges", merges}}}};
  return Tokenizer(std::move(impl));
}

namespace {

// One character (UTF-8) from a pre-tokenizer's or decoder's field.
std::string one_character(const json& j, const char* key, const std::string& source) {
  const std::string s = j.at(key).get<std::string>();
  const auto lead = s.empty() ? 0u : static_cast<unsigned char>(s[0]);
  const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  if (s.empty() || valid_utf8_prefix(s) != s.size() || s.size() != length)
    throw ConfigError(str(source, ": ", j.value("type", ""), " has ", key, " \"", s,
                          "\"; one character is needed"));
  return s;
}

// The pre_tokenizer: null, ByteLevel (GPT-2's pattern when use_regex), a Sequence of
// Split(Regex, Isolated) then ByteLevel without its regex, or Metaspace.
PreTokenizer hf_pre_tokenizer(const json& pre, const std::string& source) {
  PreTokenizer out;
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  if (pre.is_null()) {
    out.kind = PreTokenizerKind::kNone;
    return out;
  }
  if (type == "ByteLevel") {
    if (!pre.value("use_regex", true))
      throw ConfigError(str(source, ": a ByteLevel pre_tokenizer without use_regex and without a ",
                            "Split before it does not split text; not supported"));
    out.kind = PreTokenizerKind::kByteLevel;
    out.prefix_space = pre.value("add_prefix_space", false);
    out.pattern.emplace(std::string(kGpt2SplitPattern));
    return out;
  }
  if (type == "Metaspace") {
    out.kind = PreTokenizerKind::kMetaspace;
    out.replacement = one_character(pre, "replacement", source);
    if (pre.contains("prepend_scheme")) {
      const std::string scheme = pre.at("prepend_scheme").get<std::string>();
      if (scheme == "always") {
        out.prepend = PrependScheme::kAlways;
      } else if (scheme == "first") {
        out.prepend = PrependScheme::kFirst;
      } else if (scheme == "never") {
        out.prepend = PrependScheme::kNever;
      } else {
        throw ConfigError(str(source, ": Metaspace prepend_scheme \"", scheme,
                              "\" is not always, first or never"));
      }
    } else {  // files before prepend_scheme: add_prefix_space
      out.prepend =
          pre.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    out.split = pre.value("split", true);
    return out;
  }
  if (type == "Sequence") {
    const json& list = pre.at("pretokenizers");
    if (list.size() == 2 && list[0].value("type", "") == "Split" &&
        list[1].value("type", "") == "ByteLevel") {
      const json& split = list[0];
      if (list[1].value("use_regex", true))
        throw ConfigError(str(source, ": Split followed by ByteLevel with use_regex = true (two ",
                              "regex passes) is not supported"));
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
          !split.at("pattern").contains("Regex"))
        throw ConfigError(str(source, ": only Split with a Regex pattern, behavior Isolated and ",
                              "invert false is supported, got ", json_excerpt(split)));
      out.kind = PreTokenizerKind::kSplitByteLevel;
      out.prefix_space = list[1].value("add_prefix_space", false);
      out.pattern.emplace(split.at("pattern").at("Regex").get<std::string>());
      return out;
    }
  }
  throw ConfigError(str(source, ": pre_tokenizer ", type.empty() ? json_excerpt(pre, 200) : type,
                        " is not supported; memo reads none, ByteLevel, Metaspace, or Sequence ",
                        "[Split, ByteLevel]"));
}

// The ids a post_processor puts before and after one sequence: TemplateProcessing's "single"
// (its special tokens around $A), ByteLevel (none), or a Sequence of those.
void hf_post_processor(const json& post, const std::string& source, std::vector<int32_t>& before,
                       std::vector<int32_t>& after) {
  if (post.is_null()) return;
  const std::string type = post.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& p : post.at("processors")) hf_post_processor(p, source, before, after);
    return;
  }
  if (type != "TemplateProcessing")
    throw ConfigError(
        str(source, ": post_processor ", type.empty() ? json_excerpt(post, 200) : type,
            " is not supported; memo reads TemplateProcessing, ByteLevel and ", "Sequence"));
  bool seen_sequence = false;
  for (const json& piece : post.at("single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!post.at("special_tokens").contains(name))
      throw FormatError(str(source, ": the post_processor's template names ", name,
                            ", which is not among its special_tokens"));
    for (const json& id : post.at("special_tokens").at(name).at("ids"))
      (seen_sequence ? after : before)
          .push_back(json_token_id(id, source, str("post_processor token ", name)));
  }
}

// A token named in tokenizer_config.json: a string, or an AddedToken object with "content".
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& t = config.at(key);
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t.at("content").get<std::string>();
  return std::nullopt;
}

// TemplateProcessing JSON for `before` $A `after` (transformers' update_post_processor: BOS and
// EOS as add_bos_token / add_eos_token say), so the checkpoint's tokenizer.json carries them.
json template_json(const std::vector<std::pair<std::string, int32_t>>& before,
                   const std::vector<std::pair<std::string, int32_t>>& after) {
  json single = json::array(), pair = json::array(), specials = json::object();
  auto add = [&](json& list, const std::vector<std::pair<std::string, int32_t>>& tokens, int type) {
    for (const auto& [content, id] : tokens) {
      list.push_back({{"SpecialToken", {{"id", content}, {"type_id", type}}}});
      specials[content] = {{"id", content}, {"ids", {id}}, {"tokens", {content}}};
    }
  };
  add(single, before, 0);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  add(single, after, 0);
  add(pair, before, 0);
  pair.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  add(pair, after, 0);
  add(pair, before, 1);
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  add(pair, after, 1);
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

}  // namespace

// The steps of Tokenizer::from_hf_json, over the tokenizer's private state.
struct TokenizerJsonReader {
  using Impl = Tokenizer::Impl;

  static void check_model(const json& model, const std::string& source) {
    if (model.value("type", "BPE") != "BPE")
      throw ConfigError(str(source, ": model type ", model.value("type", ""),
                            " is not supported; memo reads BPE"));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && model.at(key).is_string() &&
          !model.at(key).get<std::string>().empty())
        throw ConfigError(str(source, ": BPE with a ", key, " is not supported"));
    if (model.contains("dropout") && model.at("dropout").is_number() &&
        model.at("dropout").get<double>() > 0.0)
      throw ConfigError(str(source, ": BPE dropout ", model.at("dropout").get<double>(),
                            " is not supported (encoding would be random)"));
  }

  static void read_pipeline(Impl& impl, const json& tj, const std::string& source) {
    impl.normalizer = Normalizer::from_json(tj.value("normalizer", json()), source);
    impl.pre = hf_pre_tokenizer(tj.value("pre_tokenizer", json()), source);
    impl.byte_level = impl.pre.kind == PreTokenizerKind::kByteLevel ||
                      impl.pre.kind == PreTokenizerKind::kSplitByteLevel;
    impl.decoder = Decoder::from_json(tj.value("decoder", json()), source);
    // Byte-level BPE decodes to its tokens' bytes with a ByteLevel decoder or none (memo has
    // always ignored a null decoder there: the bytes are the text).
    const bool plain_decoder =
        tj.value("decoder", json()).is_null() || impl.decoder.is_byte_level();
    impl.concat_decode = impl.byte_level && plain_decoder;
  }

  static void read_vocab(Impl& impl, const json& tj, const json& model, const std::string& source) {
    std::vector<std::string> added_contents;
    if (tj.contains("added_tokens"))
      for (const json& t : tj.at("added_tokens"))
        added_contents.push_back(t.at("content").get<std::string>());
    if (impl.byte_level) {
      // Added tokens may also sit in the vocabulary (GPT-2's <|endoftext|>); they are matched
      // literally, so their vocabulary spelling is skipped.
      json vocab = model.at("vocab");
      for (const std::string& c : added_contents) {
        auto it = vocab.find(c);
        if (it != vocab.end() && !byte_level_decode(c)) vocab.erase(it);
      }
      impl.set_vocab(vocab, {});
    } else {
      impl.set_vocab_spellings(model.at("vocab"));
      impl.byte_fallback = model.value("byte_fallback", false);
      impl.fuse_unk = model.value("fuse_unk", false);
      const json unk = model.value("unk_token", json());
      if (unk.is_string()) {
        auto it = impl.id_of_bytes.find(unk.get<std::string>());
        if (it == impl.id_of_bytes.end())
          throw FormatError(
              str(source, ": unk_token ", unk.get<std::string>(), " is not in the vocabulary"));
        impl.unk_id = it->second;
      }
    }
  }

  static void read_merges(Impl& impl, const json& merges, const std::string& source) {
    impl.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& m = merges[r];
      if (m.is_array()) {
        impl.add_merge(m.at(0).get<std::string>(), m.at(1).get<std::string>(), int32_t(r));
      } else {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos)
          throw FormatError(str(source, ": merge ", r, " \"", s, "\" is not \"left right\""));
        impl.add_merge(s.substr(0, space), s.substr(space + 1), int32_t(r));
      }
    }
  }

  // The decoder's input and the added tokens.
  static void read_added_tokens(Impl& impl, const json& tj) {
    // The decoder's input: each id's vocabulary spelling (byte-level: the bytes spelled in the
    // alphabet), added tokens as their content.
    std::vector<std::string> spellings;
    if (!impl.concat_decode) {
      spellings = impl.token_bytes;
      if (impl.byte_level)
        for (std::string& s : spellings) s = byte_level_encode(s);
    }
    if (tj.contains("added_tokens"))
      for (const json& t : tj.at("added_tokens")) {
        const int32_t id =
            json_token_id(t.at("id"), impl.source,
                          str("added token ", json_excerpt(t.value("content", json()), 40)));
        const std::string content = t.at("content").get<std::string>();
        // a flag, or Hugging Face's default where it is missing
        auto flag = [&](const char* name, bool fallback) {
          if (!t.contains(name)) return fallback;
          if (!t.at(name).is_boolean())
            throw FormatError(str(impl.source, ": added token ", json_excerpt(t.at("content"), 40),
                                  ": ", name, " is ", json_excerpt(t.at(name), 20),
                                  ", not true or false"));
          return t.at(name).get<bool>();
        };
        const bool special = flag("special", true);
        // a special token matches the raw text, another the normalized text
        impl.add_special(content, id, special, flag("normalized", !special));
        AddedToken& token = impl.added.back().token;
        token.single_word = flag("single_word", false);
        token.lstrip = flag("lstrip", false);
        token.rstrip = flag("rstrip", false);
        if (!impl.concat_decode) {
          if (spellings.size() <= size_t(id)) spellings.resize(size_t(id) + 1);
          spellings[size_t(id)] = content;
        }
      }
    impl.finish_specials();
    impl.finish_decoding(spellings);
  }

  // tokenizer_config.json: eos_token names the end of text; add_bos_token / add_eos_token, when
  // given, decide what goes around a prompt (as transformers rebuilds the template); hf is
  // rewritten to say so.
  static void apply_config(Impl& impl, json& hf, const json& config, const std::string& source) {
    auto id_of = [&](const std::string& content) -> std::optional<int32_t> {
      for (const auto& [c, id] : impl.specials)
        if (c == content) return id;
      return std::nullopt;
    };
    const std::optional<std::string> bos = config_token(config, "bos_token");
    const std::optional<std::string> eos = config_token(config, "eos_token");
    if (eos) impl.eos_id = id_of(*eos);
    if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
      std::vector<std::pair<std::string, int32_t>> before, after;
      auto named = [&](const char* flag, const std::optional<std::string>& token,
                       std::vector<std::pair<std::string, int32_t>>& out) {
        if (!config.value(flag, false)) return;
        const std::optional<int32_t> id = token ? id_of(*token) : std::nullopt;
        if (!id)
          throw ConfigError(str(source, ": tokenizer_config.json sets ", flag, " but its token ",
                                token.value_or("(none)"), " is not an added token"));
        out.emplace_back(*token, *id);
      };
      named("add_bos_token", bos, before);
      named("add_eos_token", eos, after);
      std::vector<int32_t> before_ids, after_ids;
      for (const auto& t : before) before_ids.push_back(t.second);
      for (const auto& t : after) after_ids.push_back(t.second);
      if (before_ids != impl.prefix_ids || after_ids != impl.suffix_ids) {
        impl.prefix_ids = before_ids;
        impl.suffix_ids = after_ids;
        hf["post_processor"] = template_json(before, after);
      }
    }
  }
};

Tokenizer Tokenizer::from_hf_json(const json& tj, const std::string& source, const json& config) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  json hf = tj;
  if (!tj.is_object() || !tj.contains("model") || !tj.at("model").is_object()) {
    // GPT-2's encoder.json maps token strings to ids (its "model" is token 19849)
    const bool encoder = tj.is_object() && tj.contains("!") && tj.at("!") == 0;
    throw FormatError(str(source, " is not a Hugging Face tokenizer.json: ",
                          !tj.is_object() ? "not a JSON object" : "it has no \"model\" object",
                          encoder ? " (it looks like GPT-2's encoder.json: give the folder that "
                                    "holds it and vocab.bpe)"
                                  : ""));
  }
  try {
    const json& model = tj.at("model");
    TokenizerJsonReader::check_model(model, source);
    impl->id_limit = int64_t(model.at("vocab").size()) +
                     int64_t(tj.value("added_tokens", json::array()).size()) + kIdSlack;
    TokenizerJsonReader::read_pipeline(*impl, tj, source);
    impl->ignore_merges = model.value("ignore_merges", false);
    TokenizerJsonReader::read_vocab(*impl, tj, model, source);
    TokenizerJsonReader::read_merges(*impl, model.at("merges"), source);
    TokenizerJsonReader::read_added_tokens(*impl, tj);
    hf_post_processor(tj.value("post_processor", json()), source, impl->prefix_ids,
                      impl->suffix_ids);
    if (config.is_object()) TokenizerJsonReader::apply_config(*impl, hf, config, source);
  } catch (const json::exception& e) {
    throw FormatError(str(source, " is not a Hugging Face tokenizer.json: ", e.what()));
  }
  impl->hf = std::move(hf);
  Tokenizer t(std::move(impl));
  // The ids that delimit documents and sequences are control tokens whatever tokenizer.json says:
  // a "</s>" marked "special": false would otherwise be matched in a document, which could then
  // end itself (a document boundary memo tokenize's .docs do not list).
  std::vector<int32_t> boundaries = t.impl_->prefix_ids;
  boundaries.insert(boundaries.end(), t.impl_->suffix_ids.begin(), t.impl_->suffix_ids.end());
  for (const std::optional<int32_t> id : {t.end_of_text(), t.impl_->eos_id})
    if (id) boundaries.push_back(*id);
  bool changed = false;
  for (Impl::AddedTokenSpec& spec : t.impl_->added)
    if (!spec.control &&
        std::find(boundaries.begin(), boundaries.end(), spec.token.id) != boundaries.end()) {
      spec.control = changed = true;
      t.impl_->mark_control(spec.token.id);
    }
  if (changed) t.impl_->finish_specials();
  return t;
}

Tokenizer Tokenizer::from_hf_json(const json& tj, const std::string& source) {
  return from_hf_json(tj, source, json());
}

}  // namespace memo
