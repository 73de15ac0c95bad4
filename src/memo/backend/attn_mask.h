// Which keys a query sees in the attention kernels (backend/backend.h).
#pragma once

namespace memo {

// kCausal: query row i of a sequence sees keys 0..i (the model's self-attention). kFull: every key
// of the sequence, as when the keys are a chunk that lies wholly before the queries' chunk (a
// context-parallel rank's block pairs, model/context_parallel.h).
enum class AttnMask { kCausal, kFull };

}  // namespace memo
