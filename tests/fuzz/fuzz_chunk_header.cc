// libFuzzer: chunk file headers from arbitrary bytes (what a damaged or foreign file holds). Never
// crashes, never reads past the buffer; whatever decodes is self-consistent.
#include <cstddef>
#include <cstdint>

#include "chunk_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header_size = kvstream::ChunkHeaderSize(data, size);
  auto meta = kvstream::DecodeChunkHeader(data, size);
  if (meta.ok()) {
    if (!header_size.ok() || *header_size != meta->header_size() || meta->header_size() > size) __builtin_trap();
    if (meta->segment_count() != kvstream::SegmentCount(meta->payload_size, meta->segment_size)) __builtin_trap();
    if (meta->key.empty() || meta->key.size() > kvstream::kMaxKeyLength) __builtin_trap();
  }
  return 0;
}
