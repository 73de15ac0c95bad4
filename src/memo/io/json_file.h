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

template <class E>
nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
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
