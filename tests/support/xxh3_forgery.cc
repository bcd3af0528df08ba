#include "xxh3_forgery.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "format/chunk_format.h"

#define XXH_INLINE_ALL  // XXH3's default secret is not exported by the library
#include "xxhash.h"

namespace kvstream::testing {
namespace {

constexpr size_t kStripe = 64, kBlock = 1024, kStripesPerBlock = 16, kFreeStripes = 12;

uint64_t Load(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
void Store(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof(v)); }
// What one word adds to its own lane's accumulator: the product of the halves of word ^ secret.
uint64_t Product(uint64_t keyed) { return (keyed & 0xffffffffull) * (keyed >> 32); }

// Rewrites one block (`block` holds its original bytes): false if a lane has no solution this way
// (the product target is within 2^32 of 2^64; never seen, and the block is then left as it was).
bool ForgeBlock(uint8_t* block, uint8_t fill) {
  const uint8_t* secret = XXH3_kSecret;
  uint8_t forged[kBlock];
  std::memcpy(forged, block, kBlock);
  std::memset(forged, fill, kFreeStripes * kStripe);
  for (size_t lane = 0; lane < 8; ++lane) {
    auto word = [&](const uint8_t* b, size_t s) { return Load(b + s * kStripe + lane * 8); };
    auto key = [&](size_t s) { return Load(secret + s * 8 + lane * 8); };
    uint64_t sum = 0, products = 0;  // what the last 4 words must add (mod 2^64)
    for (size_t s = 0; s < kStripesPerBlock; ++s) {
      sum += word(block, s);
      products += Product(word(block, s) ^ key(s));
    }
    for (size_t s = 0; s < kFreeStripes; ++s) {
      sum -= word(forged, s);
      products -= Product(word(forged, s) ^ key(s));
    }
    // Stripe 12: halves (h, l) with h x l = products - r; stripe 13: high half 1, low half r.
    bool solved = false;
    uint64_t keyed12 = 0, keyed13 = 0;
    for (uint64_t h = 0xffffffffull; h > 0xffff0000ull && !solved; --h) {
      const uint64_t r = products % h, l = (products - r) / h;
      if (l > 0xffffffffull) continue;
      keyed12 = (h << 32) | l;
      keyed13 = (1ull << 32) | r;
      solved = true;
    }
    if (!solved) return false;
    const uint64_t w12 = keyed12 ^ key(12), w13 = keyed13 ^ key(13);
    // Stripes 14 and 15 add nothing to the products (w14 ^ key has a zero high half, w15 ^ key a
    // zero low half) and restore the sum: w14's low half fixes the low 32 bits, w15 the rest.
    const uint64_t rest = sum - w12 - w13;
    const uint64_t w14 = (key(14) & 0xffffffff00000000ull) | ((rest - key(15)) & 0xffffffffull);
    const uint64_t w15 = rest - w14;  // its low half is key(15)'s
    Store(forged + 12 * kStripe + lane * 8, w12);
    Store(forged + 13 * kStripe + lane * 8, w13);
    Store(forged + 14 * kStripe + lane * 8, w14);
    Store(forged + 15 * kStripe + lane * 8, w15);
  }
  std::memcpy(block, forged, kBlock);
  return true;
}

}  // namespace

size_t ForgeKeepingXxh3(uint8_t* data, size_t size, uint8_t fill) {
  if (size <= kBlock) return 0;
  const size_t blocks = (size - 1) / kBlock;  // scrambled before the last (partial or full) block
  size_t changed = 0;
  uint8_t before[kBlock];
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* block = data + b * kBlock;
    std::memcpy(before, block, kBlock);
    if (!ForgeBlock(block, fill)) continue;
    for (size_t i = 0; i < kBlock; ++i) changed += before[i] != block[i];
  }
  return changed;
}

absl::StatusOr<size_t> ForgeChunkPayload(const std::string& path, uint8_t fill) {
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError("cannot open " + path);
  std::vector<uint8_t> header(kMaxHeaderBytes);
  const ssize_t got = pread(fd, header.data(), header.size(), 0);
  absl::StatusOr<ChunkMeta> meta = got > 0 ? DecodeChunkHeader(header.data(), static_cast<size_t>(got))
                                           : absl::DataLossError("cannot read the header");
  std::vector<uint8_t> payload(meta.ok() ? meta->payload_size : 0);
  absl::Status s = meta.status();
  if (s.ok() && pread(fd, payload.data(), payload.size(), meta->header_size()) != static_cast<ssize_t>(payload.size())) {
    s = absl::DataLossError("short payload");
  }
  size_t changed = 0;
  for (uint32_t i = 0; s.ok() && i < meta->segment_count(); ++i) {
    uint8_t* segment = payload.data() + uint64_t{i} * meta->segment_size;
    changed += ForgeKeepingXxh3(segment, meta->segment_length(i), fill);
    if (Checksum(segment, meta->segment_length(i)) != meta->segment_checksums[i]) {
      s = absl::InternalError("a forged segment's checksum changed");
    }
  }
  if (s.ok() && pwrite(fd, payload.data(), payload.size(), meta->header_size()) != static_cast<ssize_t>(payload.size())) {
    s = absl::InternalError("cannot write the payload");
  }
  close(fd);
  if (!s.ok()) return s;
  return changed;
}

}  // namespace kvstream::testing
