// memo's one error mechanism: memo::Error (and subclasses) thrown by the library, caught in main.
// MEMO_CHECK stays on in release builds and reports file:line, the condition and the values.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace memo {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class ConfigError : public Error {
  using Error::Error;
};  // bad config or flag value
class DataError : public Error {
  using Error::Error;
};  // missing, short or out-of-range data
class FormatError : public Error {
  using Error::Error;
};  // corrupt or truncated file
class BudgetError : public Error {
  using Error::Error;
};  // does not fit in a memory budget
// Thrown by every rank of a job at the same point, once the ranks have agreed that the job stops
// (a plan that does not fit on some rank): each rank reports and exits, and nothing need abort
// the others before they have said why.
class JobError : public Error {
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// Builds a message from any streamable pieces: str("token id ", id, " at position ", pos).
template <class... Args>
std::string str(const Args&... args) {
  return detail::concat(args...);
}

// Formats bytes as GiB with two decimals ("41.30 GiB"), the unit every memory message uses; below
// 0.1 GiB, where that would read "0.00 GiB" or nearly, in MiB or KiB with two decimals or in
// bytes ("8.00 MiB", "512.00 KiB", "96 B").
std::string gib(double bytes);

}  // namespace memo

#define MEMO_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw ::memo::Error(                                                                   \
          ::memo::str(__FILE__, ":", __LINE__, ": check failed: " #cond ": ", __VA_ARGS__)); \
  } while (0)
