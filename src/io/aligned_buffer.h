// Heap memory aligned for O_DIRECT (kFileAlignment), freed with std::free.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "format/chunk_format.h"

namespace kvstream {

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;

// `bytes` rounded up to kFileAlignment; null when the allocation fails.
inline AlignedBuffer AllocateAligned(size_t bytes) {
  return AlignedBuffer(static_cast<uint8_t*>(std::aligned_alloc(kFileAlignment, AlignUp(bytes, kFileAlignment))));
}

}  // namespace kvstream
