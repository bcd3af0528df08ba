#include "write/write_stager.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "format/chunk_mac.h"
#include "memory/client_memory.h"
#include "util/unix_time.h"

namespace kvstream {
namespace {

// absl's own string_view, which its hash maps look keys up by.
absl::string_view Key(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

WriteStager::WriteStager(uint64_t limit_bytes, double high_water, uint32_t block_size, int64_t max_defer_ns,
                         Reactor* reactor)
    : limit_bytes_(limit_bytes),
      high_water_(high_water),
      block_size_(block_size),
      max_defer_ns_(max_defer_ns),
      reactor_(reactor),
      // Buffers are at most a 64th larger than their images: a full staging's buffers are kept.
      memory_(StagingMemory::Create(limit_bytes + limit_bytes / 64)) {}

absl::Status WriteStager::Stage(std::string_view key, const void* data, size_t size, PersistCallback on_written,
                                bool block, const ChunkMeta* verified) {
  auto copy = [&](uint8_t* payload) {
    std::memcpy(payload, data, size);
    return absl::OkStatus();
  };
  return StageWith(key, size, copy, std::move(on_written), block, verified);
}

absl::Status WriteStager::StageFromFile(std::string_view key, const FileRange& source, PersistCallback on_written,
                                        bool block, const ChunkMeta* verified) {
  auto read = [&](uint8_t* payload) { return ReadClientMemory(source, payload); };
  return StageWith(key, source.size, read, std::move(on_written), block, verified);
}

absl::Status WriteStager::StageWith(std::string_view key, size_t size, absl::FunctionRef<absl::Status(uint8_t*)> fill,
                                    PersistCallback on_written, bool block, const ChunkMeta* verified) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (size == 0) return absl::InvalidArgumentError("empty chunk");
  const bool has_mac = mac_key_ != nullptr;
  const HeaderLayout layout = WrittenLayout(has_mac);
  if (absl::Status s = ChunkLayoutFits(key.size(), size, block_size_, layout); !s.ok()) return s;
  auto chunk = std::make_unique<StagedChunk>();
  const uint32_t header_size = static_cast<uint32_t>(HeaderSizeFor(key.size(), SegmentCount(size, block_size_), layout));
  chunk->image_size = header_size + AlignUp(size, kFileAlignment);
  if (chunk->image_size > limit_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", size, " bytes (", chunk->image_size,
                                                   " on disk) exceeds the staging limit of ", limit_bytes_, " bytes"));
  }
  const int64_t called_ns = reactor_->NowNs();  // how long it waits counts from here
  {
    absl::MutexLock lock(&mu_);
    while (!stopping_ && staged_bytes_ + chunk->image_size > limit_bytes_) {
      if (!block) return absl::ResourceExhaustedError("staging is full");
      ++space_waiters_;
      reactor_->Wake();  // pressure: writes may now run during reads
      const auto waited = std::chrono::steady_clock::now();
      changed_.Wait(&mu_);
      stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
      --space_waiters_;
    }
    if (stopping_) return absl::UnavailableError("store is shutting down");
    staged_bytes_ += chunk->image_size;
    ++staged_chunks_;
    chunk->seq = next_seq_++;
    unfinished_.emplace(chunk->seq, called_ns);
  }
  chunk->image = memory_->Take(chunk->image_size);
  if (!chunk->image) {
    Unreserve(*chunk);
    return absl::ResourceExhaustedError("cannot allocate staging memory");
  }
  chunk->payload_offset = header_size;
  uint8_t* payload = chunk->image.get() + header_size;
  if (absl::Status filled = fill(payload); !filled.ok()) {
    Unreserve(*chunk);
    return filled;
  }
  // Checksummed in staging, after the copy: what is written (and served from staging meanwhile)
  // is what was hashed; or, for bytes verified before the copy, what was verified, checked again
  // here: the source is its owner's memory, which may have changed since.
  const bool reuse = verified != nullptr && verified->key == key && verified->payload_size == size &&
                     verified->segment_size == block_size_;
  if (reuse && !MatchesChecksums(*verified, payload)) {
    Unreserve(*chunk);
    return absl::DataLossError(absl::StrCat("the bytes of '", Key(key), "' changed since they were verified: not copied"));
  }
  const int64_t now = UnixNowNs();
  auto meta = std::make_shared<ChunkMeta>(reuse ? *verified : DescribeChunk(key, payload, size, block_size_, now));
  // Versions of a key are ordered by this clock's time: a copy is never newer than a write made
  // here after it (another node's clock may run ahead).
  if (reuse) meta->created_unix_ns = std::min(meta->created_unix_ns, now);
  // Signed here, once, for every tier: replicas stay byte-identical. A verified chunk keeps the
  // tags its bytes were verified against (its version is the writer's), re-MACed for its time;
  // anything else is tagged as staged. Without a key, a plain chunk.
  if (!has_mac) {
    meta->mac.reset();
    meta->auth.reset();
  } else if (reuse && meta->auth) {
    mac_key_->Reseal(meta.get());
  } else if (absl::Status s = mac_key_->Sign(meta.get(), payload); !s.ok()) {
    Unreserve(*chunk);
    return s;
  }
  EncodeChunkHeader(*meta, chunk->image.get());
  chunk->stem = FileStem(key);
  chunk->meta = std::move(meta);
  chunk->callback = std::move(on_written);
  {
    absl::MutexLock lock(&mu_);
    // In version order (creation time, then staging order): producers of one key may finish
    // their copies in either order.
    std::vector<const StagedChunk*>& versions = staged_[std::string(key)].versions;
    auto newer = [&chunk](const StagedChunk* v) {
      return std::pair(v->meta->created_unix_ns, v->seq) > std::pair(chunk->meta->created_unix_ns, chunk->seq);
    };
    versions.insert(std::find_if(versions.begin(), versions.end(), newer), chunk.get());
    new_.push_back(std::move(chunk));
  }
  reactor_->Wake();
  return absl::OkStatus();
}

void WriteStager::Unreserve(StagedChunk& chunk) {
  chunk.image.Reset();
  absl::MutexLock lock(&mu_);
  staged_bytes_ -= chunk.image_size;
  --staged_chunks_;
  unfinished_.erase(chunk.seq);
  changed_.SignalAll();
}

void WriteStager::TakeStaged(std::vector<std::unique_ptr<StagedChunk>>* out) {
  absl::MutexLock lock(&mu_);
  for (auto& c : new_) out->push_back(std::move(c));
  new_.clear();
}

void WriteStager::Finish(std::unique_ptr<StagedChunk> chunk, const PersistResult& result) {
  Acknowledge(chunk.get(), result);
  Release(std::move(chunk));
}

void WriteStager::Acknowledge(StagedChunk* chunk, const PersistResult& result) {
  {
    absl::MutexLock lock(&mu_);
    ++persists_;
    if (!result.status.ok()) ++persist_failures_;
  }
  if (chunk->callback) chunk->callback(chunk->meta->key, result);
  chunk->callback = nullptr;
  absl::MutexLock lock(&mu_);
  unfinished_.erase(chunk->seq);  // only now does Flush see it as done: its callback has run
  changed_.SignalAll();
}

void WriteStager::Unlist(const StagedChunk& chunk) {
  absl::MutexLock lock(&mu_);
  auto it = staged_.find(Key(chunk.meta->key));
  if (it == staged_.end()) return;
  std::erase(it->second.versions, &chunk);
  if (it->second.versions.empty()) staged_.erase(it);
}

void WriteStager::Release(std::unique_ptr<StagedChunk> chunk) {
  Unlist(*chunk);  // out of sight before its memory goes
  chunk->image.Reset();  // back in the pool before a producer waiting for the space takes memory
  absl::MutexLock lock(&mu_);
  staged_bytes_ -= chunk->image_size;
  --staged_chunks_;
  changed_.SignalAll();  // staging space for blocked producers
}

const StagedChunk* WriteStager::Newest(std::string_view key) const {
  auto it = staged_.find(Key(key));
  return it == staged_.end() ? nullptr : it->second.versions.back();
}

std::shared_ptr<const ChunkMeta> WriteStager::StagedVersion(std::string_view key) const {
  absl::MutexLock lock(&mu_);
  const StagedChunk* newest = Newest(key);
  return newest != nullptr ? newest->meta : nullptr;
}

bool WriteStager::LockStaged(std::string_view key, int64_t until_ns) {
  absl::MutexLock lock(&mu_);
  auto it = staged_.find(Key(key));
  if (it == staged_.end()) return false;
  StagedLocks& locks = it->second.locks;
  ++locks.count;
  locks.until_ns = std::max(locks.until_ns, until_ns);
  return true;
}

bool WriteStager::UnlockStaged(std::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = staged_.find(Key(key));
  if (it == staged_.end() || it->second.locks.count == 0) return false;
  --it->second.locks.count;
  return true;
}

StagedLocks WriteStager::TakeLocks(std::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = staged_.find(Key(key));
  if (it == staged_.end()) return {};
  return std::exchange(it->second.locks, StagedLocks{});
}

const StagedChunk* WriteStager::NewestStaged(std::string_view key) const {
  absl::MutexLock lock(&mu_);
  return Newest(key);
}

bool WriteStager::pressure() const { return Above(high_water_); }

bool WriteStager::filling() const { return Above(0.5 * high_water_); }

bool WriteStager::Above(double fraction) const {
  absl::MutexLock lock(&mu_);
  return stopping_ || space_waiters_ > 0 || staged_bytes_ > fraction * limit_bytes_;
}

bool WriteStager::MayWrite(WritePolicy policy, bool reads_pending, int64_t now_ns) const {
  return policy == WritePolicy::kImmediate || !reads_pending || now_ns >= WritesDueNs() || pressure();
}

int64_t WriteStager::WritesDueNs() const {
  absl::MutexLock lock(&mu_);
  if (unfinished_.empty()) return INT64_MAX;
  const int64_t since = unfinished_.begin()->second;  // the oldest (to within producers racing for a seq)
  return since > INT64_MAX - max_defer_ns_ ? INT64_MAX : since + max_defer_ns_;
}

void WriteStager::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = next_seq_;
  while (!unfinished_.empty() && unfinished_.begin()->first < target) changed_.Wait(&mu_);
}

void WriteStager::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  changed_.SignalAll();
}

bool WriteStager::empty() const {
  absl::MutexLock lock(&mu_);
  return unfinished_.empty();
}

uint64_t WriteStager::staged_bytes() const {
  absl::MutexLock lock(&mu_);
  return staged_bytes_;
}

uint64_t WriteStager::staged_chunks() const {
  absl::MutexLock lock(&mu_);
  return staged_chunks_;
}

uint64_t WriteStager::persists() const {
  absl::MutexLock lock(&mu_);
  return persists_;
}

double WriteStager::stall_seconds() const {
  absl::MutexLock lock(&mu_);
  return stall_seconds_;
}

uint64_t WriteStager::persist_failures() const {
  absl::MutexLock lock(&mu_);
  return persist_failures_;
}

}  // namespace kvstream
