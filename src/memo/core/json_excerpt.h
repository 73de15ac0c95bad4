// A JSON value as an error message quotes it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace memo {

namespace detail {
inline void json_excerpt_into(std::string& out, const nlohmann::json& v, int depth, size_t limit) {
  if (!v.is_array() && !v.is_object()) {
    out += v.dump();
    return;
  }
  const bool object = v.is_object();
  if (depth == 0 && !v.empty()) {
    out += object ? "{...}" : "[...]";
    return;
  }
  out += object ? '{' : '[';
  for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
    if (it != v.begin()) out += ',';
    if (object) out += nlohmann::json(it.key()).dump() + ':';
    json_excerpt_into(out, *it, depth - 1, limit);
  }
  out += object ? '}' : ']';
}
}  // namespace detail

// v as nlohmann's compact dump() writes it, cut to max_chars characters ("..." after the cut),
// with arrays and objects nested deeper than three levels shown as [...] and {...}: a hostile
// file's value of a million nested brackets neither floods the one-line error nor overflows the
// stack, as dump() (which recurses) would.
inline std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 120) {
  std::string out;
  detail::json_excerpt_into(out, v, 3, max_chars);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

}  // namespace memo
