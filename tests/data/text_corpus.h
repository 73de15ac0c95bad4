// A varied text set for tokenizer tests: English (the KJV Bible, when data/kjv.txt or Debian's
// `bible` program is there), code (memo's own sources), and generated text in other scripts,
// emoji sequences and whitespace runs. Valid UTF-8 throughout; cut into chunks at line ends so
// that two tokenizers can be fed the very same strings.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace memo::test {

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Words and runs from many scripts, emoji (ZWJ sequences, skin tones, flags, keycaps), digits,
// punctuation, contractions in both cases, and whitespace runs (spaces, tabs, CR/LF, NBSP,
// ideographic space, line separator). Characters whose class changed between Unicode 14 (PCRE2
// 10.42) and 15.1 (node's ICU), and U+FEFF (JavaScript's \s has it, Unicode's White_Space does
// not), are left out: the comparison is about memo, not about Unicode versions.
inline std::string generated_text(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  struct Range {
    char32_t first, last;
  };
  const std::vector<Range> scripts = {
      {0x0430, 0x044F}, {0x03B1, 0x03C9}, {0x05D0, 0x05EA}, {0x0627, 0x064A}, {0x0905, 0x0939},
      {0x4E00, 0x9FA5}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0xAC00, 0xD7A3}, {0x0E01, 0x0E30},
      {0x00C0, 0x00FF}, {0x0660, 0x0669}, {0x0966, 0x096F}, {0xFF10, 0xFF19}, {0x2160, 0x2169}};
  const std::vector<std::string> specials = {
      "\xF0\x9F\x98\x80",
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
      "1\xEF\xB8\x8F\xE2\x83\xA3",
      "\xE2\x9D\xA4\xEF\xB8\x8F",
      "e\xCC\x81",
      "'s",
      "'S",
      "'re",
      "'LL",
      "'ve",
      "'d",
      "'m",
      "'t",
      "don't",
      "<|endoftext|>",
      "...",
      "--",
      "{}",
      "();",
      "#!",
      "\xE2\x80\x94",
      "\xC2\xAB",
      "\xC2\xBB",
      "$1,234.50",
      "2024-05-20",
      "3.14159",
      "0x1F",
      "__init__",
      "snake_case",
      "CamelCase"};
  const std::vector<std::string> spaces = {" ",        "  ",           "   ",          "\t",
                                           "\n",       "\r\n",         "\n\n",         " \n ",
                                           "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\t\t  "};
  std::string s;
  while (s.size() < bytes) {
    const uint32_t r = rng() % 10;
    if (r < 5) {
      const Range& range = scripts[rng() % scripts.size()];
      const int n = 1 + int(rng() % 8);
      for (int i = 0; i < n; ++i)
        append_utf8(s, range.first + rng() % (range.last - range.first + 1));
    } else if (r < 7) {
      s += specials[rng() % specials.size()];
    } else if (r < 9) {
      s += spaces[rng() % spaces.size()];
    } else {
      s += std::string(1 + rng() % 40, " \n\t"[rng() % 3]);
    }
    if (rng() % 4 == 0) s += ' ';
    if (rng() % 30 == 0) s += '\n';
  }
  return s;
}

// Up to `bytes` of the KJV Bible (data/kjv.txt in the source tree, else Debian's `bible`), or ""
// when neither is available.
inline std::string kjv_text(size_t bytes) {
  const std::filesystem::path file = std::filesystem::path(source_dir()) / "data" / "kjv.txt";
  std::string text;
  if (std::filesystem::exists(file)) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    const CommandResult r = run_command("bible gen1:1-rev22:21 2>/dev/null");
    if (r.exit_code == 0) text = r.output;
  }
  return text.substr(0, std::min(bytes, text.size()));
}

// Up to `bytes` of memo's own C++ sources (src/ and tests/), in path order.
inline std::string source_code_text(size_t bytes) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const char* dir : {"src", "tests"}) {
    const fs::path root = fs::path(source_dir()) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && (e.path().extension() == ".cc" || e.path().extension() == ".h"))
        files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) {
    if (text.size() >= bytes) break;
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  return text.substr(0, std::min(bytes, text.size()));
}

// Chunks of about `target` bytes ending at a line end (or the text's end), so no UTF-8
// character is cut.
inline std::vector<std::string> line_chunks(const std::string& text, size_t target) {
  std::vector<std::string> chunks;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', std::min(at + target, text.size()));
    end = end == std::string::npos ? text.size() : end + 1;
    chunks.push_back(text.substr(at, end - at));
    at = end;
  }
  return chunks;
}

}  // namespace memo::test
