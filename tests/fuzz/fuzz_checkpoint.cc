// libFuzzer, structure-aware: index checkpoints (saved indexes, read from a tier). The mutator
// sets the chunk count and any aligned 32- or 64-bit word to powers of two and boundaries (counts
// and sizes an attacker would claim), and every input is sealed with a matching trailing checksum
// before it is decoded: the fuzzer explores the decoder's bounds, not the checksum. Never
// crashes or allocates what the bytes cannot hold; what decodes re-encodes to a checkpoint that
// decodes the same (to the same bytes when it was one of the current version).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>

#include "format/index_checkpoint.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

constexpr size_t kCountAt = 12;   // after "KVSINDEX" and the u32 version
constexpr size_t kMinimum = 28;   // magic, version, count, checksum

// The trailing checksum a writer would append: xxh3-64 of everything before it.
void Seal(uint8_t* data, size_t size) {
  if (size < kMinimum) return;
  const uint64_t checksum = kvstream::Checksum(data, size - 8);
  std::memcpy(data + size - 8, &checksum, 8);
}

uint64_t Interesting(std::minstd_rand& rng, unsigned bits, uint64_t old) {
  const uint64_t power = uint64_t{1} << (rng() % bits);
  switch (rng() % 6) {
    case 0: return power;
    case 1: return power + (rng() % 16) - 8;
    case 2: return old + (rng() % 64) - 32;
    case 3: return ~uint64_t{0} - rng() % 4;
    case 4: return old * 2;
    default: return (uint64_t{rng()} << 32) ^ rng();
  }
}

bool Same(const kvstream::ChunkMeta& a, const kvstream::ChunkMeta& b) {
  return a.key == b.key && a.payload_size == b.payload_size && a.payload_checksum == b.payload_checksum &&
         a.created_unix_ns == b.created_unix_ns && a.segment_size == b.segment_size &&
         a.segment_checksums == b.segment_checksums && a.mac == b.mac;
}

void Check(std::string_view bytes) {
  auto chunks = kvstream::DecodeCheckpoint(bytes);
  if (!chunks.ok()) return;
  const std::string again = kvstream::EncodeCheckpoint(*chunks);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  if (version == kvstream::kCheckpointVersion && again != bytes) __builtin_trap();
  auto decoded = kvstream::DecodeCheckpoint(again);
  if (!decoded.ok() || decoded->size() != chunks->size()) __builtin_trap();
  for (size_t i = 0; i < chunks->size(); ++i) {
    if (!Same((*decoded)[i], (*chunks)[i])) __builtin_trap();
    (void)(*chunks)[i].file_size();  // a decoded chunk's sizes are the format's
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  if (size < kMinimum || rng() % 3 == 0) size = LLVMFuzzerMutate(data, size, max_size);
  if (size >= kMinimum + 8) {
    for (unsigned n = 1 + rng() % 2; n > 0; --n) {
      // The count, or any 4-aligned word before the checksum (key lengths, sizes, segment counts).
      const bool count = rng() % 3 == 0;
      const size_t width = count || rng() % 2 ? 8 : 4;
      const size_t words = (size - 8 - width) / 4;
      const size_t at = count ? kCountAt : 4 * (rng() % (words + 1));
      uint64_t old = 0;
      std::memcpy(&old, data + at, width);
      const uint64_t v = Interesting(rng, 8 * static_cast<unsigned>(width), old);
      std::memcpy(data + at, &v, width);
    }
  }
  Seal(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);  // as found
  if (size >= kMinimum) {
    Seal(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size());
    Check(bytes);  // as a writer would seal it
  }
  return 0;
}
