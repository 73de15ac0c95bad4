#include "memo/memory/offload.h"

namespace memo {

int64_t OffloadStrategy::choose_offload_rows(int64_t batch, int64_t seq) {
  return layout().token_rows(batch, seq);
}

std::string OffloadStrategy::summary() const {
  return str("offload: layers 0..", layout().num_layers - 3,
             " go to the host whole; the top two stay on the device");
}

}  // namespace memo
