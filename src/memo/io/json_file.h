// Reading a whole JSON file with the one error message memo gives for it: the path, the byte
// offset of the fault and the parser's reason. The error type is the caller's: a config file's
// fault is a ConfigError, a checkpoint's a FormatError.
#pragma once

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/io/atomic_file.h"

namespace memo {

// Nesting no JSON file memo reads comes near (a tokenizer.json nests about 8 deep); the parser
// builds a deeper document, but copying one recurses once per level and overflows the stack.
constexpr size_t kMaxJsonDepth = 256;

// E naming `what` when `text` nests arrays and objects deeper than kMaxJsonDepth (a scan of the
// brackets outside strings; malformed text is left to the parser).
template <class E>
void check_json_depth(std::string_view text, std::string_view what) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw E(str(what, ": JSON nested more than ", kMaxJsonDepth, " deep at byte ", i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

template <class E>
nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  check_json_depth<E>(text, path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // the parser counts an unexpected end as the byte after the last
    throw E(str(path.string(), ": malformed JSON at byte ", std::min(e.byte, text.size()), " of ",
                text.size(), ": ", e.what()));
  } catch (const nlohmann::json::exception& e) {  // a number past a double's range
    throw E(str(path.string(), ": ", e.what()));
  }
}

// A field of a config file that holds the wrong JSON type: ConfigError naming `where`, the field,
// its value and the type expected.
[[noreturn]] inline void wrong_type(std::string_view where, const char* name,
                                    const nlohmann::json& v, const char* expected) {
  throw ConfigError(str(where, ": field ", name, " = ", json_excerpt(v), " is a ", v.type_name(),
                        ", expected ", expected));
}

}  // namespace memo
