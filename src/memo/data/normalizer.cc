// Implementation of data/normalizer.h over utf8proc (normal forms, lower case, categories) and
// data/split_pattern.h (Replace with a Regex pattern).
#include "memo/data/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/data/split_pattern.h"

namespace memo {

using nlohmann::json;

size_t valid_utf8_prefix(std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {  // ASCII: the common case, no call
      ++at;
      continue;
    }
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p + at, utf8proc_ssize_t(text.size() - at), &c);
    if (n <= 0) return at;
    at += size_t(n);
  }
  return at;
}

// The separators (Zs, Zl, Zp), tab through carriage return, and NEL.
bool is_unicode_white_space(int32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  if (c < 0) return false;
  const utf8proc_category_t category = utf8proc_category(c);
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL ||
         category == UTF8PROC_CATEGORY_ZP;
}

namespace {

// Applies `fn` (valid UTF-8 -> text) to each maximal valid run of `text`; invalid bytes are copied
// between the results one at a time.
template <typename Fn>
std::string map_valid_runs(std::string_view text, Fn fn) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) out += fn(text.substr(0, valid));
    if (valid == text.size()) break;
    out += text[valid];
    text.remove_prefix(valid + 1);
  }
  return out;
}

void append_code_point(std::string& out, utf8proc_int32_t c) {
  utf8proc_uint8_t buffer[4];
  out.append(reinterpret_cast<const char*>(buffer), size_t(utf8proc_encode_char(c, buffer)));
}

// Calls fn(code point) for each character of valid UTF-8.
template <typename Fn>
void for_each_code_point(std::string_view valid, Fn fn) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(valid.data());
  for (size_t at = 0; at < valid.size();) {
    utf8proc_int32_t c = 0;
    at += size_t(utf8proc_iterate(p + at, utf8proc_ssize_t(valid.size() - at), &c));
    fn(c);
  }
}

// One utf8proc_map call; the result it allocates is owned here and freed once.
std::string utf8proc_mapped(std::string_view valid, utf8proc_option_t options) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                                          utf8proc_ssize_t(valid.size()), &mapped, options);
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  if (n < 0)
    throw DataError(str("utf8proc could not normalize ", valid.size(),
                        " bytes of valid UTF-8: ", utf8proc_errmsg(n)));
  return std::string(reinterpret_cast<const char*>(mapped), size_t(n));
}

}  // namespace

struct Normalizer::Step {
  virtual ~Step() = default;
  // `continued`: the text continues text normalized before it (Tokenizer::encode_continued), so
  // what belongs only at the start of a text (Prepend, a left Strip) does not apply.
  virtual std::string apply(std::string_view text, bool continued) const = 0;
};

namespace {

struct UnicodeForm : Normalizer::Step {
  utf8proc_option_t options;
  explicit UnicodeForm(utf8proc_option_t o) : options(o) {}
  std::string apply(std::string_view text, bool /*continued*/) const override {
    // ASCII is its own normal form in all four: most text skips utf8proc.
    if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; }))
      return std::string(text);
    return map_valid_runs(text, [&](std::string_view v) { return utf8proc_mapped(v, options); });
  }
};

// Hugging Face's Prepend: the string goes before non-empty text.
struct Prepend : Normalizer::Step {
  std::string prefix;
  std::string apply(std::string_view text, bool continued) const override {
    return text.empty() || continued ? std::string(text) : prefix + std::string(text);
  }
};

// Every non-overlapping occurrence, leftmost first, of a string or a regex becomes `content`.
struct Replace : Normalizer::Step {
  std::string literal;                // the String pattern, when not a regex
  std::optional<SplitPattern> regex;  // the Regex pattern
  std::string content;
  std::string apply(std::string_view text, bool /*continued*/) const override {
    std::vector<Piece> found;
    if (regex) {
      regex->find_all(text, found);
    } else {
      for (size_t at = text.find(literal); at != std::string_view::npos;
           at = text.find(literal, at + literal.size()))
        found.push_back({at, at + literal.size()});
    }
    std::string out;
    out.reserve(text.size());
    size_t at = 0;
    for (const Piece& m : found) {
      out.append(text.substr(at, m.begin - at));
      out += content;
      at = m.end;
    }
    out.append(text.substr(at));
    return out;
  }
};

// Each character's lower case (Rust's char::to_lowercase, as Hugging Face applies it one
// character at a time): utf8proc's simple mapping, except U+0130, the one character whose
// unconditional full mapping (SpecialCasing.txt) is two characters, "i" + U+0307.
struct Lowercase : Normalizer::Step {
  std::string apply(std::string_view text, bool /*continued*/) const override {
    return map_valid_runs(text, [](std::string_view v) {
      std::string out;
      out.reserve(v.size());
      for_each_code_point(v, [&](utf8proc_int32_t c) {
        if (c == 0x130) {
          out += "i\xCC\x87";
        } else {
          append_code_point(out, utf8proc_tolower(c));
        }
      });
      return out;
    });
  }
};

// White_Space characters off the start and/or the end (of the valid text at each end).
struct Strip : Normalizer::Step {
  bool left = true, right = true;
  std::string apply(std::string_view text, bool continued) const override {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    size_t begin = 0, end = text.size();
    if (left && !continued) {
      while (begin < end) {
        utf8proc_int32_t c = 0;
        const utf8proc_ssize_t n = utf8proc_iterate(p + begin, utf8proc_ssize_t(end - begin), &c);
        if (n <= 0 || !is_unicode_white_space(c)) break;
        begin += size_t(n);
      }
    }
    if (right) {
      while (end > begin) {
        size_t start = end - 1;  // back to the first byte of the last character
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        utf8proc_int32_t c = 0;
        const utf8proc_ssize_t n = utf8proc_iterate(p + start, utf8proc_ssize_t(end - start), &c);
        if (n <= 0 || size_t(n) != end - start || !is_unicode_white_space(c)) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }
};

void add_steps(const json& n, const std::string& source,
               std::vector<std::unique_ptr<Normalizer::Step>>& steps) {
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : n.at("normalizers")) add_steps(inner, source, steps);
  } else if (type == "NFC") {
    steps.push_back(
        std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE)));
  } else if (type == "NFD") {
    steps.push_back(
        std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE)));
  } else if (type == "NFKC") {
    steps.push_back(std::make_unique<UnicodeForm>(
        utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT)));
  } else if (type == "NFKD") {
    steps.push_back(std::make_unique<UnicodeForm>(
        utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT)));
  } else if (type == "Prepend") {
    auto step = std::make_unique<Prepend>();
    step->prefix = n.at("prepend").get<std::string>();
    steps.push_back(std::move(step));
  } else if (type == "Replace") {
    auto step = std::make_unique<Replace>();
    const json& pattern = n.at("pattern");
    if (pattern.contains("Regex")) {
      step->regex.emplace(pattern.at("Regex").get<std::string>());
    } else {
      step->literal = pattern.at("String").get<std::string>();
      if (step->literal.empty())
        throw ConfigError(str(source, ": a Replace normalizer with an empty String pattern"));
    }
    step->content = n.at("content").get<std::string>();
    steps.push_back(std::move(step));
  } else if (type == "Lowercase") {
    steps.push_back(std::make_unique<Lowercase>());
  } else if (type == "Strip") {
    auto step = std::make_unique<Strip>();
    step->left = n.value("strip_left", true);
    step->right = n.value("strip_right", true);
    steps.push_back(std::move(step));
  } else {
    throw ConfigError(str(source, ": normalizer ", type.empty() ? json_excerpt(n, 200) : type,
                          " is not supported; memo reads NFC, NFD, NFKC, NFKD, Prepend, Replace, ",
                          "Lowercase, Strip and Sequence"));
  }
}

}  // namespace

Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

Normalizer Normalizer::from_json(const json& normalizer, const std::string& source) {
  Normalizer out;
  if (!normalizer.is_null()) add_steps(normalizer, source, out.steps_);
  return out;
}

std::string Normalizer::normalize(std::string_view text, bool continued) const {
  std::string out(text);
  for (const auto& step : steps_) out = step->apply(out, continued);
  return out;
}

bool Normalizer::empty() const { return steps_.empty(); }

}  // namespace memo
