// The cluster key: a keyed MAC in every chunk header written while a store has one, so a chunk on
// a shared tier is served only if a node holding the key wrote it (docs/chunk-format.md, "MAC";
// docs/security.md). Anyone with write access to a shared file system can publish a file with a
// valid header checksum; only a holder of the key can make its MAC verify.
//
// The MAC is keyed BLAKE2b with a 32-byte output (libsodium crypto_generichash): a MAC by design
// (a keyed PRF, no length extension, so no HMAC construction is needed), one pass over the input,
// and faster than HMAC-SHA-512-256 (crypto_auth) on the small inputs here: a header's fixed
// fields, its key and its segment checksums (16 x 8 bytes for a 16 MiB chunk in 1 MiB blocks).
// The payload is bound to the segment checksums, which every read verifies.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "format/chunk_format.h"

namespace kvstream {

class ChunkMacKey {
 public:
  static constexpr size_t kMinKeyFileBytes = 32;
  static constexpr size_t kMaxKeyFileBytes = 4096;

  // Loads the key file at `path`: a regular file (not a symlink, never opened blocking) that no
  // group or other user may read or write (mode & 077 == 0), holding 32 to 4096 bytes of key
  // material, taken exactly as they are (raw bytes; a trailing newline is part of the key, so
  // every node needs the identical file: e.g. `head -c 32 /dev/urandom > key; chmod 0600 key`).
  // The MAC key is BLAKE2b-256 of those bytes. InvalidArgument / PermissionDenied / NotFound,
  // with the path and the reason, otherwise.
  static absl::StatusOr<std::shared_ptr<const ChunkMacKey>> Load(const std::string& path);
  // A key from bytes in memory (tests, benchmarks); at least kMinKeyFileBytes of them.
  static absl::StatusOr<std::shared_ptr<const ChunkMacKey>> FromBytes(const void* data, size_t size);

  ~ChunkMacKey();  // zeroes and frees the key (sodium_free)
  ChunkMacKey(const ChunkMacKey&) = delete;
  ChunkMacKey& operator=(const ChunkMacKey&) = delete;

  // The MAC of `meta`'s header (ForEachMacInput); `meta.mac` itself is not part of it.
  ChunkMac Compute(const ChunkMeta& meta) const;
  // Sets meta->mac to Compute(*meta).
  void Sign(ChunkMeta* meta) const { meta->mac = Compute(*meta); }
  // Whether `meta.mac` is present and equals Compute(meta), compared in constant time.
  bool Verify(const ChunkMeta& meta) const;

 private:
  ChunkMacKey() = default;
  unsigned char* key_ = nullptr;  // 32 bytes in sodium_malloc'd memory, read-only after Load
};

// Whether a header read from a tier may be used: with `key`, a MAC that is present must verify
// (a failure is PermissionDenied: written without the cluster key, or altered); with `require`,
// a header without a MAC is refused too (PermissionDenied). With no key, OK (the MAC, if any,
// cannot be checked and is kept as it is).
absl::Status VerifyChunkMac(const ChunkMeta& meta, const ChunkMacKey* key, bool require);

// Logs a chunk refused by VerifyChunkMac (or unreadable for want of permission) on the tier at
// `tier_path`: at most one line a second from all threads together, the next line saying how many
// were left out (a shared tier full of foreign files must not flood the log).
void LogRefusedChunk(const std::string& tier_path, const std::string& stem, const absl::Status& why);

}  // namespace kvstream
