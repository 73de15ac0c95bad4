// Implementation of data/decoder.h. Each step maps the list of token strings to a new list, as
// Hugging Face's decode_chain does; the text is the final list joined.
#include "memo/data/decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/data/byte_level.h"
#include "memo/data/split_pattern.h"

namespace memo {

using nlohmann::json;

struct Decoder::Step {
  virtual ~Step() = default;
  // `whole`: see Decoder::decode. `joined`: an earlier step made the list one string of the
  // whole text (Fuse, ByteLevel); a step may set it.
  virtual void apply(std::vector<std::string>& tokens, bool whole, bool& joined) const = 0;
};

namespace {

// Length of the UTF-8 character starting with byte c (1 for a stray continuation byte).
size_t utf8_length(unsigned char c) {
  if (c >= 0xF0) return 4;
  if (c >= 0xE0) return 3;
  if (c >= 0xC0) return 2;
  return 1;
}

void join_all(std::vector<std::string>& tokens) {
  std::string all;
  for (const std::string& t : tokens) all += t;
  tokens.assign(1, std::move(all));
}

// Each token's bytes from the byte-level alphabet (a token with a character outside it, an added
// token such as "<|endoftext|>" spelled otherwise, stays as it is); then one string.
struct ByteLevel : Decoder::Step {
  void apply(std::vector<std::string>& tokens, bool, bool& joined) const override {
    for (std::string& t : tokens)
      if (std::optional<std::string> raw = byte_level_decode(t)) t = std::move(*raw);
    join_all(tokens);
    joined = true;
  }
};

// A run of "<0xNN>" tokens becomes one token of those bytes.
struct ByteFallback : Decoder::Step {
  static std::optional<char> byte_of(const std::string& t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return std::nullopt;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return char(hi * 16 + lo);
  }
  void apply(std::vector<std::string>& tokens, bool, bool&) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool in_run = false;
    for (std::string& t : tokens) {
      if (std::optional<char> b = byte_of(t)) {
        bytes += *b;
        in_run = true;
        continue;
      }
      if (in_run) out.push_back(std::move(bytes));
      bytes.clear();
      in_run = false;
      out.push_back(std::move(t));
    }
    if (in_run) out.push_back(std::move(bytes));
    tokens = std::move(out);
  }
};

struct Fuse : Decoder::Step {
  void apply(std::vector<std::string>& tokens, bool, bool& joined) const override {
    join_all(tokens);
    joined = true;
  }
};

// Up to `start` leading and `stop` trailing copies of the character `content` off each token.
struct StripDecoder : Decoder::Step {
  std::string content;  // one character, UTF-8
  size_t start = 0, stop = 0;
  void apply(std::vector<std::string>& tokens, bool whole, bool& joined) const override {
    if (joined && !whole) return;  // the joined text's ends are not the sequence's
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start && t.compare(begin, content.size(), content) == 0; ++i)
        begin += content.size();
      for (size_t i = 0; i < stop && end >= begin + content.size() &&
                         t.compare(end - content.size(), content.size(), content) == 0;
           ++i)
        end -= content.size();
      t = t.substr(begin, end - begin);
    }
  }
};

struct ReplaceDecoder : Decoder::Step {
  std::string literal;
  std::optional<SplitPattern> regex;
  std::string content;
  void apply(std::vector<std::string>& tokens, bool, bool&) const override {
    std::vector<Piece> found;
    for (std::string& t : tokens) {
      found.clear();
      if (regex) {
        regex->find_all(t, found);
      } else {
        for (size_t at = t.find(literal); at != std::string::npos;
             at = t.find(literal, at + literal.size()))
          found.push_back({at, at + literal.size()});
      }
      if (found.empty()) continue;
      std::string out;
      size_t at = 0;
      for (const Piece& m : found) {
        out.append(t, at, m.begin - at);
        out += content;
        at = m.end;
      }
      out.append(t, at);
      t = std::move(out);
    }
  }
};

// The replacement character becomes a space; in the first token of a sequence whose pre-tokenizer
// prepends it, every replacement character is dropped instead (Hugging Face's rule).
struct Metaspace : Decoder::Step {
  std::string replacement;  // one character, UTF-8
  bool prepends = true;     // prepend_scheme first or always
  void apply(std::vector<std::string>& tokens, bool whole, bool&) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = whole && i == 0 && prepends;
      std::string out;
      const std::string& t = tokens[i];
      for (size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement.size(), replacement) == 0) {
          if (!drop) out += ' ';
          at += replacement.size();
        } else {
          out += t[at++];
        }
      }
      tokens[i] = std::move(out);
    }
  }
};

std::string one_character(const json& j, const char* key, const std::string& source) {
  const std::string s = j.at(key).get<std::string>();
  if (s.empty() || utf8_length(static_cast<unsigned char>(s[0])) != s.size())
    throw ConfigError(str(source, ": decoder ", j.value("type", ""), " has ", key, " \"", s,
                          "\"; one character is needed"));
  return s;
}

void add_steps(const json& d, const std::string& source,
               std::vector<std::unique_ptr<Decoder::Step>>& steps) {
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : d.at("decoders")) add_steps(inner, source, steps);
  } else if (type == "ByteLevel") {
    steps.push_back(std::make_unique<ByteLevel>());
  } else if (type == "ByteFallback") {
    steps.push_back(std::make_unique<ByteFallback>());
  } else if (type == "Fuse") {
    steps.push_back(std::make_unique<Fuse>());
  } else if (type == "Strip") {
    auto step = std::make_unique<StripDecoder>();
    step->content = one_character(d, "content", source);
    step->start = d.at("start").get<size_t>();
    step->stop = d.at("stop").get<size_t>();
    steps.push_back(std::move(step));
  } else if (type == "Replace") {
    auto step = std::make_unique<ReplaceDecoder>();
    const json& pattern = d.at("pattern");
    if (pattern.contains("Regex")) {
      step->regex.emplace(pattern.at("Regex").get<std::string>());
    } else {
      step->literal = pattern.at("String").get<std::string>();
      if (step->literal.empty())
        throw ConfigError(str(source, ": a Replace decoder with an empty String pattern"));
    }
    step->content = d.at("content").get<std::string>();
    steps.push_back(std::move(step));
  } else if (type == "Metaspace") {
    auto step = std::make_unique<Metaspace>();
    step->replacement = one_character(d, "replacement", source);
    if (d.contains("prepend_scheme")) {
      step->prepends = d.at("prepend_scheme").get<std::string>() != "never";
    } else {  // files before prepend_scheme: add_prefix_space
      step->prepends = d.value("add_prefix_space", true);
    }
    steps.push_back(std::move(step));
  } else {
    throw ConfigError(str(source, ": decoder ", type.empty() ? json_excerpt(d, 200) : type,
                          " is not supported; memo reads ByteLevel, ByteFallback, Fuse, Strip, ",
                          "Replace, Metaspace and Sequence"));
  }
}

}  // namespace

Decoder::Decoder() = default;
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

Decoder Decoder::from_json(const json& decoder, const std::string& source) {
  Decoder out;
  if (!decoder.is_null()) add_steps(decoder, source, out.steps_);
  return out;
}

std::string Decoder::decode(std::vector<std::string> tokens, bool whole) const {
  bool joined = false;
  for (const auto& step : steps_) step->apply(tokens, whole, joined);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

bool Decoder::is_byte_level() const {
  return steps_.size() == 1 && dynamic_cast<const ByteLevel*>(steps_[0].get()) != nullptr;
}

}  // namespace memo
