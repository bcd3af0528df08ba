#include "format/chunk_mac.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

static_assert(crypto_generichash_BYTES == kChunkMacBytes);
static_assert(crypto_generichash_KEYBYTES == 32);
constexpr char kKeyContext[] = "kvstream chunk MAC key v1";          // domains of the key derivations
constexpr char kSegmentKeyContext[] = "kvstream segment tag key v2";
constexpr size_t kGcmIvBytes = 12;

// BLAKE2b-256 of `data` keyed by `context` (a domain string) into `out` (32 bytes).
void DeriveKey(const char* context, const void* data, size_t size, unsigned char* out) {
  crypto_generichash_state state;
  crypto_generichash_init(&state, reinterpret_cast<const unsigned char*>(context), std::strlen(context),
                          crypto_generichash_KEYBYTES);
  crypto_generichash_update(&state, static_cast<const unsigned char*>(data), size);
  crypto_generichash_final(&state, out, crypto_generichash_KEYBYTES);
  sodium_memzero(&state, sizeof(state));
}

// AES-256-GCM, fetched once (an implicit fetch on every init would take OpenSSL's locks).
const EVP_CIPHER* Gcm() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return cipher;
}

// One cipher context per thread, reused for every tag it computes.
EVP_CIPHER_CTX* ThreadGcmContext() {
  struct Owned {
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    ~Owned() { EVP_CIPHER_CTX_free(ctx); }
  };
  thread_local Owned owned;
  return owned.ctx;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChunkMacKey>> ChunkMacKey::FromBytes(const void* data, size_t size) {
  if (size < kMinKeyFileBytes || size > kMaxKeyFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a cluster key must be ", kMinKeyFileBytes, " to ",
                                                   kMaxKeyFileBytes, " bytes, not ", size));
  }
  if (sodium_init() < 0) return absl::InternalError("libsodium failed to initialise");
  if (Gcm() == nullptr) return absl::InternalError("OpenSSL has no AES-256-GCM");
  std::shared_ptr<ChunkMacKey> key(new ChunkMacKey());
  key->key_ = static_cast<unsigned char*>(sodium_malloc(crypto_generichash_KEYBYTES));
  key->segment_key_ = static_cast<unsigned char*>(sodium_malloc(crypto_generichash_KEYBYTES));
  if (key->key_ == nullptr || key->segment_key_ == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate the cluster key");
  }
  // Each key is a hash of the file's bytes (keyed by its context string), so any length of key
  // material gives full-strength 32-byte keys, independent of each other, and never the material.
  DeriveKey(kKeyContext, data, size, key->key_);
  DeriveKey(kSegmentKeyContext, data, size, key->segment_key_);
  sodium_mprotect_readonly(key->key_);
  sodium_mprotect_readonly(key->segment_key_);
  return std::shared_ptr<const ChunkMacKey>(std::move(key));
}

ChunkMacKey::~ChunkMacKey() {
  if (key_ != nullptr) sodium_free(key_);  // zeroes it
  if (segment_key_ != nullptr) sodium_free(segment_key_);
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

bool ChunkMacKey::TagSegment(const ChunkNonce& nonce, uint32_t segment, const uint8_t* data, size_t size,
                             SegmentTag* tag, Touch touch) const {
  unsigned char chunk_key[crypto_generichash_KEYBYTES];  // this version's GMAC key
  crypto_generichash(chunk_key, sizeof(chunk_key), nonce.data(), nonce.size(), segment_key_, crypto_generichash_KEYBYTES);
  unsigned char iv[kGcmIvBytes] = {};
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<unsigned char>(segment >> (8 * i));
  EVP_CIPHER_CTX* ctx = ThreadGcmContext();
  bool ok = ctx != nullptr && EVP_EncryptInit_ex(ctx, Gcm(), nullptr, chunk_key, iv) == 1;
  sodium_memzero(chunk_key, sizeof(chunk_key));
  // GMAC: the segment as additional authenticated data, nothing encrypted. OpenSSL takes lengths
  // as int: in pieces of at most 1 GiB. Everything that allocates (the context, its key schedule)
  // is done above, outside `touch`.
  int out = 0;
  ok = ok && touch([&] {
         for (size_t done = 0; ok && done < size;) {
           const size_t piece = std::min<size_t>(size - done, size_t{1} << 30);
           ok = EVP_EncryptUpdate(ctx, nullptr, &out, data + done, static_cast<int>(piece)) == 1;
           done += piece;
         }
       });
  unsigned char none[16];
  ok = ok && EVP_EncryptFinal_ex(ctx, none, &out) == 1 &&
       EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag->size()), tag->data()) == 1;
  return ok;
}

absl::Status ChunkMacKey::Sign(ChunkMeta* meta, const uint8_t* payload) const {
  ChunkAuth auth;
  randombytes_buf(auth.nonce.data(), auth.nonce.size());
  auth.tags.resize(meta->segment_count());
  for (uint32_t i = 0; i < meta->segment_count(); ++i) {
    if (!TagSegment(auth.nonce, i, payload + uint64_t{i} * meta->segment_size, meta->segment_length(i), &auth.tags[i],
                    RunDirectly)) {
      return absl::InternalError("OpenSSL could not compute a segment tag (AES-256-GMAC)");
    }
  }
  meta->auth = std::move(auth);
  meta->mac = Compute(*meta);
  return absl::OkStatus();
}

bool ChunkMacKey::VerifySegment(const ChunkMeta& meta, uint32_t segment, const uint8_t* data, size_t size,
                                Touch touch) const {
  if (!meta.auth || segment >= meta.auth->tags.size() || segment >= meta.segment_count() ||
      size != meta.segment_length(segment)) {
    return false;
  }
  SegmentTag tag;
  return TagSegment(meta.auth->nonce, segment, data, size, &tag, touch) &&
         crypto_verify_16(tag.data(), meta.auth->tags[segment].data()) == 0;
}

bool ChunkMacKey::Verify(const ChunkMeta& meta) const {
  if (!meta.mac) return false;
  const ChunkMac expected = Compute(meta);
  return crypto_verify_32(expected.data(), meta.mac->data()) == 0;
}

absl::Status VerifyChunkMac(const ChunkMeta& meta, const ChunkMacKey* key, bool require) {
  if (key == nullptr) return absl::OkStatus();
  if (!meta.auth && require) {
    return absl::PermissionDeniedError(
        meta.mac ? "the chunk's payload is not authenticated (format version 1) and this tier requires it (cluster key)"
                 : "the chunk header carries no MAC and this tier requires one (cluster key)");
  }
  if (!meta.mac) return absl::OkStatus();
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
