#include "memo/memory/skeletal.h"

namespace memo {

Shape SkeletalField::shape(int64_t batch, int64_t seq) const {
  if (heads > 0) return {batch, heads, seq};
  const int64_t rows = batch * seq / row_shards;
  if (width > 0) return {rows, width};
  return {rows};
}

int64_t SkeletalLayout::layer_bytes(int64_t batch, int64_t seq) const {
  int64_t bytes = 0;
  for (const SkeletalField& f : fields) bytes += f.bytes(batch, seq);
  return bytes;
}

}  // namespace memo
