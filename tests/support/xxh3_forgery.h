// Second preimages of XXH3-64, the segment checksums of the chunk format: what anyone who can write
// a shared tier can do to a payload in microseconds, so that the tests can show such a payload is
// never served where it must be authenticated (docs/security.md).
//
// XXH3 (inputs over 240 bytes) adds every 64-byte stripe into eight 64-bit accumulators, lane by
// lane: lane i's word w goes into accumulator i^1 as w and into accumulator i as the product of
// the two 32-bit halves of w ^ secret, and the accumulators are scrambled only at the end of each
// 1 KiB block. So within a block each lane's sum and sum of products is all the hash keeps: the
// first 12 stripes of a block can be anything, and the last 4 words of each lane solved to restore
// both sums (two words whose key-xored high or low half is 0 add nothing to the products and
// restore the sum; a word with a high half of 1 and one with a high half near 2^32 restore the
// products). Every block the hash scrambles before its last is rewritten so; the last is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvstream::testing {

// Rewrites `data` (`size` bytes, hashed as one XXH3-64 input with the default secret and seed 0)
// in place so that XXH3_64bits(data, size) is unchanged: in every 1 KiB block but the last, the
// first 768 bytes become `fill` and the other 256 are solved. Returns how many bytes changed (0
// for inputs of 1 KiB or less, which it leaves alone).
size_t ForgeKeepingXxh3(uint8_t* data, size_t size, uint8_t fill);

// Rewrites the payload of the chunk file at `path` in place, segment by segment as above, and
// leaves its header (checksum, segment checksums, MAC, tags) as it was: what a writer of a shared
// tier can do to any chunk. Returns how many payload bytes changed; an error if the file is not a
// chunk file it can read and write, or if a segment's XXH3-64 checksum did not survive.
absl::StatusOr<size_t> ForgeChunkPayload(const std::string& path, uint8_t fill);

}  // namespace kvstream::testing
