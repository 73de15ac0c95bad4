#include "memo/core/error.h"

#include <cstdio>

namespace memo {

std::string gib(double bytes) {
  char buf[64];
  const double size = bytes < 0 ? -bytes : bytes;
  if (size >= 0.1 * 1024.0 * 1024.0 * 1024.0 || size == 0.0)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  else if (size >= 1024.0 * 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  else if (size >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

}  // namespace memo
