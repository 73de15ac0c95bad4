#include "memo/memory/offload.h"

namespace memo {

int64_t OffloadStrategy::choose_offload_rows(int64_t batch, int64_t seq) {
  return layout().token_rows(batch, seq);
}

std::string OffloadStrategy::summary() const {
  const int last = layout().num_layers - 3;  // the highest layer sent to the host
  if (last < 0) return "offload: no layer goes to the host; the top two stay on the device";
  return str("offload: ", last == 0 ? std::string("layer 0 goes") : str("layers 0..", last, " go"),
             " to the host whole; the top two stay on the device");
}

}  // namespace memo
