// The cluster key: what makes a chunk on a shared tier servable only if a node holding the key
// wrote it, bytes and all (docs/chunk-format.md, "MAC and segment tags (cluster key)";
// docs/security.md). Anyone with write access to a shared file system can publish a file with a
// valid header checksum, and can rewrite a payload to match any XXH3-64 segment checksum (XXH3 is
// not a cryptographic hash); only a holder of the key can make a MAC or a segment tag verify.
//
// Two keys are derived from the key file, each BLAKE2b-256 of its bytes under its own context:
// - the header MAC: keyed BLAKE2b, 32-byte output (libsodium crypto_generichash), over every
//   header byte before it: the fixed fields, the nonce, the key, the segment checksums and tags;
// - the segment tags (version 2): AES-256-GMAC (OpenSSL) of each segment, under a chunk key
//   derived from the segment key and the writer's random 32-byte nonce (keyed BLAKE2b), with the
//   segment's index as the 96-bit IV. A fresh nonce per written version makes every (chunk key,
//   IV) pair authenticate exactly one segment, as GMAC requires; GMAC runs at AES-NI/PCLMUL speed
//   (about 5 GB/s a core here, against 0.45 for keyed BLAKE2b and 1.4 for SHA-256), so the
//   verifier threads check every byte read from a shared tier at GB/s.
#pragma once

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "format/chunk_format.h"

namespace kvstream {

class ChunkMacKey {
 public:
  static constexpr size_t kMinKeyFileBytes = 32;
  static constexpr size_t kMaxKeyFileBytes = 4096;

  // A key from its material in memory: a key file's bytes (io/cluster_key_file.h reads the file),
  // or any bytes in tests and benchmarks; kMinKeyFileBytes to kMaxKeyFileBytes of them.
  static absl::StatusOr<std::shared_ptr<const ChunkMacKey>> FromBytes(const void* data, size_t size);

  ~ChunkMacKey();  // zeroes and frees the key (sodium_free)
  ChunkMacKey(const ChunkMacKey&) = delete;
  ChunkMacKey& operator=(const ChunkMacKey&) = delete;

  // The MAC of `meta`'s header (ForEachMacInput); `meta.mac` itself is not part of it.
  ChunkMac Compute(const ChunkMeta& meta) const;
  // Makes `meta` (whose payload is `payload`: meta.payload_size bytes) an authenticated chunk of
  // format version 2: a fresh random nonce, the tag of every segment, then the header MAC.
  // Internal (and `meta` unchanged) if OpenSSL fails.
  absl::Status Sign(ChunkMeta* meta, const uint8_t* payload) const;
  // Sets meta->mac to Compute(*meta), keeping its nonce and tags: for a copy of bytes verified
  // against them (another node's chunk read from a shared tier), re-timed.
  void Reseal(ChunkMeta* meta) const { meta->mac = Compute(*meta); }
  // Whether `meta.mac` is present and equals Compute(meta), compared in constant time.
  bool Verify(const ChunkMeta& meta) const;
  // Runs the one step of a tag's computation that reads the segment's bytes (and does nothing
  // else: it allocates nothing, takes no lock) and says whether it ran to its end: a SIGBUS guard
  // for memory that may vanish (memory/client_memory.h, GuardedAccess), or RunDirectly.
  using Touch = absl::FunctionRef<bool(absl::FunctionRef<void()>)>;
  static bool RunDirectly(absl::FunctionRef<void()> step) {
    step();
    return true;
  }
  // Whether `data` (`size` bytes) is segment `segment` of the version `meta` describes: `meta` is
  // authenticated (and verified: Verify), `segment` one of its segments, `size` that segment's
  // length, and the tag of `data`, read through `touch`, equals the header's (compared in
  // constant time). False when `touch` did not run to its end. Thread-safe; about 0.2 core-seconds
  // per GB.
  bool VerifySegment(const ChunkMeta& meta, uint32_t segment, const uint8_t* data, size_t size,
                     Touch touch = RunDirectly) const;

 private:
  ChunkMacKey() = default;
  // The GMAC tag of segment `segment` of the chunk version with `nonce`, its bytes read through
  // `touch`; false when OpenSSL fails or `touch` did not run to its end.
  bool TagSegment(const ChunkNonce& nonce, uint32_t segment, const uint8_t* data, size_t size, SegmentTag* tag,
                  Touch touch) const;
  // Both in sodium_malloc'd memory, read-only once FromBytes has derived them.
  unsigned char* key_ = nullptr;          // 32 bytes: the header MAC's key
  unsigned char* segment_key_ = nullptr;  // 32 bytes: derives each chunk version's GMAC key
};

// Whether a header read from a tier may be used: with `key`, a MAC that is present must verify
// (a failure is PermissionDenied: written without the cluster key, or altered); with `require`,
// a header that is not authenticated (no MAC, or format version 1, whose MAC does not cover its
// payload) is refused too (PermissionDenied). With no key, OK (the MAC, if any, cannot be checked
// and is kept as it is).
absl::Status VerifyChunkMac(const ChunkMeta& meta, const ChunkMacKey* key, bool require);

// Logs a chunk refused by VerifyChunkMac (or unreadable for want of permission) on the tier at
// `tier_path`: at most one line a second from all threads together, the next line saying how many
// were left out (a shared tier full of foreign files must not flood the log).
void LogRefusedChunk(const std::string& tier_path, const std::string& stem, const absl::Status& why);

}  // namespace kvstream
