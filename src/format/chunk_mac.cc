#include "format/chunk_mac.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "errno_status.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

static_assert(crypto_generichash_BYTES == kChunkMacBytes);
static_assert(crypto_generichash_KEYBYTES == 32);
constexpr char kKeyContext[] = "kvstream chunk MAC key v1";  // domain of the key derivation

absl::Status Fail(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("shared_key_file ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChunkMacKey>> ChunkMacKey::FromBytes(const void* data, size_t size) {
  if (size < kMinKeyFileBytes || size > kMaxKeyFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a cluster key must be ", kMinKeyFileBytes, " to ",
                                                   kMaxKeyFileBytes, " bytes, not ", size));
  }
  if (sodium_init() < 0) return absl::InternalError("libsodium failed to initialise");
  std::shared_ptr<ChunkMacKey> key(new ChunkMacKey());
  key->key_ = static_cast<unsigned char*>(sodium_malloc(crypto_generichash_KEYBYTES));
  if (key->key_ == nullptr) return absl::ResourceExhaustedError("cannot allocate the cluster key");
  // The MAC key is a hash of the file's bytes (keyed by a context string), so any length of key
  // material gives a full-strength 32-byte key and never the material itself.
  crypto_generichash_state state;
  crypto_generichash_init(&state, reinterpret_cast<const unsigned char*>(kKeyContext), sizeof(kKeyContext) - 1,
                          crypto_generichash_KEYBYTES);
  crypto_generichash_update(&state, static_cast<const unsigned char*>(data), size);
  crypto_generichash_final(&state, key->key_, crypto_generichash_KEYBYTES);
  sodium_memzero(&state, sizeof(state));
  sodium_mprotect_readonly(key->key_);
  return std::shared_ptr<const ChunkMacKey>(std::move(key));
}

absl::StatusOr<std::shared_ptr<const ChunkMacKey>> ChunkMacKey::Load(const std::string& path) {
  if (sodium_init() < 0) return absl::InternalError("libsodium failed to initialise");  // before sodium_malloc
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return Fail(path, "is a symbolic link (name the key file itself)");
    return ErrnoStatus(err, absl::StrCat("shared_key_file ", path));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("stat shared_key_file ", path));
  }
  absl::Status bad;
  if (!S_ISREG(st.st_mode)) {
    bad = Fail(path, "is not a regular file");
  } else if ((st.st_mode & 077) != 0) {
    bad = absl::PermissionDeniedError(absl::StrFormat(
        "shared_key_file %s has mode %04o; it must not be readable or writable by group or others (chmod 0600)", path,
        st.st_mode & 0777));
  } else if (st.st_size < static_cast<off_t>(kMinKeyFileBytes) || st.st_size > static_cast<off_t>(kMaxKeyFileBytes)) {
    bad = Fail(path, absl::StrCat("holds ", st.st_size, " bytes; a key file holds ", kMinKeyFileBytes, " to ",
                                  kMaxKeyFileBytes, " bytes (e.g. head -c 32 /dev/urandom)"));
  }
  if (!bad.ok()) {
    close(fd);
    return bad;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  auto* material = static_cast<unsigned char*>(sodium_malloc(size));
  if (material == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError("cannot allocate the cluster key");
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, material + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = errno;
  close(fd);
  absl::StatusOr<std::shared_ptr<const ChunkMacKey>> key =
      done == size ? FromBytes(material, size)
                   : absl::StatusOr<std::shared_ptr<const ChunkMacKey>>(
                         ErrnoStatus(err, absl::StrCat("read shared_key_file ", path, " (changed while read?)")));
  sodium_free(material);  // zeroes it
  return key;
}

ChunkMacKey::~ChunkMacKey() {
  if (key_ != nullptr) sodium_free(key_);  // zeroes it
}

ChunkMac ChunkMacKey::Compute(const ChunkMeta& meta) const {
  crypto_generichash_state state;
  crypto_generichash_init(&state, key_, crypto_generichash_KEYBYTES, kChunkMacBytes);
  ForEachMacInput(meta, [&state](const void* data, size_t size) {
    crypto_generichash_update(&state, static_cast<const unsigned char*>(data), size);
  });
  ChunkMac mac;
  crypto_generichash_final(&state, mac.data(), mac.size());
  return mac;
}

bool ChunkMacKey::Verify(const ChunkMeta& meta) const {
  if (!meta.mac) return false;
  const ChunkMac expected = Compute(meta);
  return crypto_verify_32(expected.data(), meta.mac->data()) == 0;
}

absl::Status VerifyChunkMac(const ChunkMeta& meta, const ChunkMacKey* key, bool require) {
  if (key == nullptr) return absl::OkStatus();
  if (!meta.mac) {
    if (!require) return absl::OkStatus();
    return absl::PermissionDeniedError("the chunk header carries no MAC and this tier requires one (cluster key)");
  }
  if (!key->Verify(meta)) {
    return absl::PermissionDeniedError("the chunk header's MAC does not verify: written without the cluster key, or altered");
  }
  return absl::OkStatus();
}

void LogRefusedChunk(const std::string& tier_path, const std::string& stem, const absl::Status& why) {
  static std::atomic<int64_t> next_ns{0};
  static std::atomic<uint64_t> refused{0};
  constexpr int64_t kPeriodNs = 1'000'000'000;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t next = next_ns.load(std::memory_order_relaxed);
  if (now < next || !next_ns.compare_exchange_strong(next, now + kPeriodNs, std::memory_order_relaxed)) {
    refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t left_out = refused.exchange(0, std::memory_order_relaxed);
  spdlog::warn("tier {}: not serving chunk {}: {}{}", tier_path, stem, std::string(why.message()),
               left_out ? absl::StrCat(" (", left_out, " more refused chunks not logged)") : "");
}

}  // namespace kvstream
