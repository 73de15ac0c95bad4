// The noise scale a training run logged: `memo train --log` writes one JSON object per step with
// gns_b_simple (tokens; null while unmeasured), the estimator's ratio of EMAs after that step
// (noise_scale.h). This reads the late, smoothed value for `memo lr --from-log`. Not here: the
// estimator, or any other field of the log.
#pragma once

#include <cstdint>
#include <string>

namespace memo::scaling {

struct LoggedNoiseScale {
  double b_simple = 0.0;   // tokens: the last logged gns_b_simple (already smoothed by the EMAs)
  int64_t step = 0;        // the step it was logged at (0 when the record has no step)
  int64_t records = 0;     // JSON lines read
  int64_t with_value = 0;  // of those, lines with a gns_b_simple number
};

// The last finite, positive gns_b_simple of the log (the last line wins when a resumed run logged
// a step twice). Throws DataError when the file cannot be read or holds no such value (with what
// to change), FormatError "PATH line N: ..." for a line that is not a JSON object; a last line
// without its newline (a write cut short) is ignored.
LoggedNoiseScale late_noise_scale(const std::string& log_path);

}  // namespace memo::scaling
