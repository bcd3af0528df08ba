#include "io/s3_device.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "format/chunk_format.h"
#include "format/index_checkpoint.h"
#include "io/chunk_files.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr char kIndexName[] = ".kvstream.index";
constexpr char kNodesDir[] = ".nodes/";
constexpr size_t kStemLength = 32;
// The largest object a replica may grow to: the largest header and payload the format holds.
constexpr uint64_t kMaxObjectBytes = kMaxHeaderBytes + kMaxPayloadBytes + kFileAlignment;
// The largest ranged GET adjacent block reads of one object are merged into (fewer requests: an
// object store's cost and much of its time are per request).
constexpr uint64_t kMaxMergedReadBytes = 16u << 20;
// Header reads of a cold scan in flight at once.
constexpr size_t kScanReadsInFlight = 64;

// What an S3 outcome means for a data operation, as a file's errno would (tier_device.h).
IoCompletion CompletionOf(IoRequest* request, const S3Result& result) {
  IoCompletion c{request, IoStatus::kOk, 0};
  switch (result.outcome) {
    case S3Outcome::kOk: break;
    case S3Outcome::kNotFound: c = {request, IoStatus::kGone, ENOENT}; break;
    case S3Outcome::kPreconditionFailed: c = {request, IoStatus::kExists, EEXIST}; break;
    case S3Outcome::kDenied: c = {request, IoStatus::kFailed, EACCES}; break;
    case S3Outcome::kTimedOut: c = {request, IoStatus::kFailed, ETIMEDOUT}; break;
    case S3Outcome::kUnreachable: c = {request, IoStatus::kFailed, ECONNREFUSED}; break;
    case S3Outcome::kThrottled:
    case S3Outcome::kServerError: c = {request, IoStatus::kFailed, EAGAIN}; break;
    case S3Outcome::kBadResponse: c = {request, IoStatus::kFailed, EPROTO}; break;
    case S3Outcome::kCancelled: c = {request, IoStatus::kFailed, ECANCELED}; break;
    case S3Outcome::kFailed: c = {request, IoStatus::kFailed, EIO}; break;
  }
  if (c.status == IoStatus::kOk && request->kind == IoKind::kRead) {
    request->transferred = static_cast<uint32_t>(std::min<uint64_t>(result.bytes, request->length));
    if (request->transferred < request->length) c = {request, IoStatus::kEndOfFile, ENODATA};  // a short object
  }
  return c;
}

// Counts asynchronous requests in flight (Scan's header reads) and waits for them.
class Pending {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    --count_;
    changed_.SignalAll();
  }
  void WaitBelow(size_t n) {
    absl::MutexLock lock(&mu_);
    while (count_ >= n) changed_.Wait(&mu_);
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<S3Device>> S3Device::Open(S3DeviceOptions options) {
  options.client.max_in_flight = options.read_depth + options.write_depth + 2;  // + probe, removals
  options.client.max_connections = options.client.max_in_flight;
  // Bodies go unsigned (UNSIGNED-PAYLOAD): hashing them would cost the loop about 1 ms per MiB at
  // every publish, and a chunk's bytes are checked end to end anyway (its checksums, and with a
  // cluster key its MAC and segment tags, verified at every read).
  options.client.sign_payload = false;
  std::unique_ptr<S3Device> device(new S3Device(std::move(options)));
  absl::StatusOr<std::unique_ptr<S3Client>> client = S3Client::Create(device->options_.client);
  if (!client.ok()) return client.status();
  device->client_ = *std::move(client);
  if (absl::Status s = device->client_->CheckBucket(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(device->options_.path, ": ", s.message()));
  }
  {
    absl::MutexLock lock(&device->condition_mu_);
    device->last_answer_ns_ = MonotonicNs();  // the bucket check just answered
    device->answers_seen_ = device->client_->answers();
  }
  DeviceProperties& p = device->props_;
  p.direct_io = true;  // nothing is cached on this node
  p.shared = device->shared();
  p.io_engine = "s3";
  p.async_commit = true;
  p.durable_commit = true;
  p.abandon_is_final = true;
  return device;
}

S3Device::~S3Device() {
  // Every callback runs (cancelled) before the members it touches go; those that would issue more
  // requests (a mutation queued behind a cancelled one, a marker's removal) see stopping_ and do
  // not: client_ is null while it is destroyed.
  stopping_.store(true);
  client_.reset();
}

std::string S3Device::ObjectKey(const std::string& stem) const {
  return absl::StrCat(options_.prefix, stem, kChunkSuffix);
}
std::string S3Device::MarkerKey(const std::string& stem) const {
  return absl::StrCat(options_.prefix, kNodesDir, options_.node, "/", stem);
}
std::string S3Device::IndexKey() const {
  return shared() ? absl::StrCat(options_.prefix, kNodesDir, options_.node, "/", kIndexName)
                  : absl::StrCat(options_.prefix, kIndexName);
}

uint64_t S3Device::resubmits() const { return client_->retries(); }

// --- Catalog: listing, headers, the saved index ------------------------------------------------

absl::StatusOr<S3Device::Listing> S3Device::List() {
  absl::StatusOr<std::vector<S3ListedObject>> objects = client_->List(options_.prefix, options_.max_listed_objects);
  if (!objects.ok()) {
    return absl::Status(objects.status().code(), absl::StrCat(options_.path, ": listing: ", objects.status().message()));
  }
  absl::flat_hash_map<std::string, uint64_t> published;  // stem -> object size
  std::vector<std::string> markers;                      // shared: stems with this node's marker
  const std::string own_dir = shared() ? absl::StrCat(options_.prefix, kNodesDir, options_.node, "/") : "";
  for (const S3ListedObject& o : *objects) {
    std::string_view name = o.key;
    if (!name.starts_with(options_.prefix)) continue;  // a store that lists outside the prefix
    name.remove_prefix(options_.prefix.size());
    if (name.size() == kStemLength + kChunkSuffixLength && name.ends_with(kChunkSuffix) &&
        IsHexStem(name.substr(0, kStemLength), kStemLength)) {
      published[std::string(name.substr(0, kStemLength))] = o.size;
    } else if (shared() && std::string_view(o.key).starts_with(own_dir)) {
      const std::string_view stem = std::string_view(o.key).substr(own_dir.size());
      if (IsHexStem(stem, kStemLength) && stem.size() == kStemLength) markers.emplace_back(stem);
    }
  }
  Listing out;
  if (!shared()) {
    for (const auto& [stem, size] : published) out.own.push_back({stem, size});
    return out;
  }
  for (std::string& stem : markers) {
    auto it = published.find(stem);
    if (it != published.end()) {
      out.own.push_back({std::move(stem), it->second});
    } else {
      out.orphan_markers.push_back(std::move(stem));
    }
  }
  return out;
}

absl::StatusOr<ScannedChunk> S3Device::DecodeObjectHeader(const std::string& stem, const std::string& bytes,
                                                          uint64_t object_size) const {
  absl::StatusOr<ChunkMeta> meta = DecodeChunkHeader(bytes.data(), bytes.size());
  if (!meta.ok()) return meta.status();
  if (absl::Status s = VerifyChunkMac(*meta, options_.mac_key.get(), options_.require_mac); !s.ok()) return s;
  if (FileStem(meta->key) != stem) return absl::DataLossError("object name does not match its key");
  if (object_size != 0 && object_size != meta->file_size()) {
    return absl::DataLossError(absl::StrCat("object is ", object_size, " bytes, header says ", meta->file_size()));
  }
  return ScannedChunk{*std::move(meta), object_size};
}

absl::StatusOr<ScannedChunk> S3Device::FetchHeader(const std::string& stem, uint64_t object_size, std::string bytes) {
  // Reads the first `length` bytes of the object into `bytes`.
  const auto read = [&](size_t length) -> absl::Status {
    bytes.assign(length, '\0');
    absl::Notification done;
    S3Result result;
    client_->Get(ObjectKey(stem), 0, static_cast<uint32_t>(length), bytes.data(), [&](const S3Result& r) {
      result = r;
      done.Notify();
    });
    done.WaitForNotification();
    Unanswered(result);
    if (!result.ok()) return ToStatus(result, absl::StrCat(options_.path, ": header of ", stem));
    if (object_size == 0) object_size = result.object_size;
    bytes.resize(result.bytes);
    return absl::OkStatus();
  };
  if (bytes.empty()) {
    if (absl::Status s = read(kFileAlignment); !s.ok()) return s;
  }
  absl::StatusOr<ScannedChunk> chunk = DecodeObjectHeader(stem, bytes, object_size);
  if (!absl::IsOutOfRange(chunk.status())) return chunk;
  absl::StatusOr<uint32_t> size = ChunkHeaderSize(bytes.data(), bytes.size());  // a long key or many segments
  if (!size.ok()) return size.status();
  if (absl::Status s = read(*size); !s.ok()) return s;
  chunk = DecodeObjectHeader(stem, bytes, object_size);
  if (absl::IsOutOfRange(chunk.status())) return absl::DataLossError("header truncated");
  return chunk;
}

absl::StatusOr<ScanReport> S3Device::Scan() {
  ScanReport report;
  // The index saved at the last clean shutdown, taken once.
  absl::StatusOr<std::string> saved = client_->GetObject(IndexKey(), kMaxCheckpointBytes);
  if (saved.ok()) {
    absl::StatusOr<std::vector<ChunkMeta>> chunks = DecodeCheckpoint(*saved);
    if (absl::Status s = client_->DeleteObject(IndexKey()); !s.ok()) {
      // Left in place, a later start would trust it after this run changed the tier.
      return absl::Status(s.code(), absl::StrCat(options_.path, ": cannot take its saved index: ", s.message()));
    }
    if (chunks.ok()) {
      report.from_checkpoint = true;
      report.chunks = SavedChunks(*std::move(chunks), options_.path, options_.mac_key.get(), options_.require_mac);
      return report;
    }
    spdlog::warn("tier {}: ignoring its saved index: {}; reading every chunk header", options_.path,
                 std::string(chunks.status().message()));
  } else if (!absl::IsNotFound(saved.status())) {
    spdlog::warn("tier {}: ignoring its saved index: {}; reading every chunk header", options_.path,
                 std::string(saved.status().message()));
  }
  absl::StatusOr<Listing> listing = List();
  if (!listing.ok()) return listing.status();
  for (const std::string& stem : listing->orphan_markers) {  // a publish cut short before a crash
    if (client_->DeleteObject(MarkerKey(stem)).ok()) ++report.removed_temporaries;
  }
  const std::vector<ListedChunk>& own = listing->own;
  // Every header, many reads in flight.
  struct Read {
    std::string bytes = std::string(kFileAlignment, '\0');
    S3Result result;
  };
  std::vector<Read> reads(own.size());
  Pending pending;
  for (size_t i = 0; i < own.size(); ++i) {
    pending.WaitBelow(kScanReadsInFlight);
    pending.Add();
    Read& r = reads[i];
    client_->Get(ObjectKey(own[i].stem), 0, kFileAlignment, r.bytes.data(), [&r, &pending](const S3Result& result) {
      r.result = result;
      pending.Done();
    });
  }
  pending.WaitBelow(1);
  for (size_t i = 0; i < own.size(); ++i) {
    const std::string& stem = own[i].stem;
    Read& r = reads[i];
    absl::StatusOr<ScannedChunk> chunk = absl::UnknownError("unread");
    if (r.result.ok()) {
      r.bytes.resize(r.result.bytes);
      chunk = FetchHeader(stem, own[i].file_size, std::move(r.bytes));  // reads more only past 4 KiB
    } else {
      chunk = ToStatus(r.result, absl::StrCat("header of ", stem));
    }
    if (chunk.ok()) {
      report.chunks.push_back(*std::move(chunk));
      continue;
    }
    if (absl::IsNotFound(chunk.status())) continue;  // removed since it was listed
    if (!absl::IsDataLoss(chunk.status()) && !absl::IsPermissionDenied(chunk.status())) {
      return absl::Status(chunk.status().code(), absl::StrCat(options_.path, ": ", chunk.status().message()));
    }
    spdlog::warn("tier {}: removing invalid chunk object {}: {}", options_.path, ObjectKey(stem),
                 std::string(chunk.status().message()));
    absl::Status removed = client_->DeleteObject(ObjectKey(stem));
    if (removed.ok() && shared()) removed = client_->DeleteObject(MarkerKey(stem));
    if (!removed.ok()) spdlog::warn("tier {}: {}", options_.path, std::string(removed.message()));
    ++report.removed_invalid;
  }
  return report;
}

absl::Status S3Device::SaveIndex(const std::vector<ChunkMeta>& chunks) {
  absl::Status s = client_->PutObject(IndexKey(), EncodeCheckpoint(chunks));
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat(options_.path, ": saving its index: ", s.message()));
}

absl::StatusOr<std::vector<ListedChunk>> S3Device::ListChunks() {
  absl::StatusOr<Listing> listing = List();
  if (!listing.ok()) return listing.status();
  return std::move(listing->own);
}

absl::StatusOr<ScannedChunk> S3Device::ReadChunkHeader(const std::string& stem) {
  absl::StatusOr<ScannedChunk> chunk = FetchHeader(stem, 0);
  if (absl::IsPermissionDenied(chunk.status())) {  // refused by the cluster key: no chunk here
    LogRefusedChunk(options_.path, stem, chunk.status());
    return absl::NotFoundError(chunk.status().message());
  }
  if (chunk.ok() && shared()) {
    absl::StatusOr<S3Result> marker = client_->Head(MarkerKey(stem));
    chunk->owned = marker.ok();
  }
  return chunk;
}

absl::StatusOr<uint64_t> S3Device::ChunkFileSize(const std::string& stem) {
  absl::StatusOr<S3Result> head = client_->Head(ObjectKey(stem));
  if (!head.ok()) return head.status();
  return head->object_size;
}

// --- Data path ------------------------------------------------------------------------------------

absl::StatusOr<FileHandle> S3Device::OpenChunk(const std::string& stem) {
  std::string key = ObjectKey(stem);
  if (auto it = handle_of_.find(key); it != handle_of_.end()) return it->second;
  // Handles cost a string each: forget them all now and then (none is in use between calls but
  // by queued reads, which carry their key with them).
  if (handle_of_.size() >= 65536) {
    handle_of_.clear();
    read_keys_.clear();
  }
  const FileHandle h = next_handle_++;
  if (next_handle_ < 0) next_handle_ = 1;
  handle_of_[key] = h;
  read_keys_[h] = std::move(key);
  return h;
}

absl::StatusOr<FileHandle> S3Device::CreateTemp(const std::string& stem) {
  const FileHandle h = next_handle_++;
  if (next_handle_ < 0) next_handle_ = 1;
  temps_[h] = Temp{stem, {}};
  return h;
}

void S3Device::AbortTemp(FileHandle temp) { temps_.erase(temp); }

absl::Status S3Device::CommitTemp(FileHandle temp, const std::string& stem, bool) {
  // Not the loop's way (async_commit): kept for callers off the loop.
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InvalidArgumentError("not a temporary of this tier");
  Temp t = std::move(it->second);
  temps_.erase(it);
  S3PutOptions put;
  if (shared()) {
    if (absl::Status s = client_->PutObject(MarkerKey(stem), ""); !s.ok()) return s;
    put.if_none_match = true;
  }
  absl::Status s = client_->PutObject(ObjectKey(stem), t.bytes, put);
  if (absl::IsFailedPrecondition(s)) {
    client_->DeleteObject(MarkerKey(stem)).IgnoreError();
    return absl::AlreadyExistsError(absl::StrCat(ObjectKey(stem), ": published by another node first"));
  }
  return s;
}

void S3Device::Post(const IoCompletion& completion) {
  {
    absl::MutexLock lock(&mu_);
    ready_.push_back(completion);
  }
  Wake();
}

void S3Device::Wake() {
  if (options_.event_fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(options_.event_fd, &one, sizeof(one));
  }
}

void S3Device::Finish(IoRequest* request, const S3Result& result) {
  Unanswered(result);
  {
    absl::MutexLock lock(&mu_);
    running_.erase(request);
    ready_.push_back(CompletionOf(request, result));
    landed_.SignalAll();
  }
  Wake();
}

void S3Device::Unanswered(const S3Result& result) {
  if (result.http_status != 0 ||
      (result.outcome != S3Outcome::kUnreachable && result.outcome != S3Outcome::kTimedOut)) {
    return;  // an answer (Condition counts those through S3Client::answers) or a cancel
  }
  absl::MutexLock lock(&condition_mu_);
  if (unanswered_since_ns_ == 0) unanswered_since_ns_ = MonotonicNs();
  unanswered_reason_ = result.message;
}

void S3Device::Mutate(const std::string& key, Mutation start) {
  bool first;
  {
    absl::MutexLock lock(&mu_);
    auto& queue = mutations_[key];
    queue.push_back(std::move(start));
    first = queue.size() == 1;
  }
  if (first) StartMutation(key);
}

void S3Device::StartMutation(const std::string& key) {
  if (stopping_.load()) return;  // the device is going: nobody waits for it
  Mutation m;
  {
    absl::MutexLock lock(&mu_);
    m = mutations_[key].front();  // a copy: the queue keeps its head until it ends
  }
  m([this, key] { EndMutation(key); });
}

void S3Device::EndMutation(const std::string& key) {
  bool more;
  {
    absl::MutexLock lock(&mu_);
    auto it = mutations_.find(key);
    it->second.pop_front();
    more = !it->second.empty();
    if (!more) mutations_.erase(it);
  }
  if (more) StartMutation(key);
}

bool S3Device::Queue(IoRequest* request) {
  request->transferred = 0;
  switch (request->kind) {
    case IoKind::kRead: {
      auto it = read_keys_.find(request->file);
      if (it == read_keys_.end()) {
        Post({request, IoStatus::kFailed, EBADF});
        return true;
      }
      pending_reads_.push_back({request, it->second});  // issued by Submit, merged where adjacent
      return true;
    }
    case IoKind::kWrite: {
      auto it = temps_.find(request->file);
      if (it == temps_.end() || request->offset > kMaxObjectBytes || request->length > kMaxObjectBytes - request->offset) {
        Post({request, IoStatus::kFailed, it == temps_.end() ? EBADF : EFBIG});
        return true;
      }
      std::string& bytes = it->second.bytes;
      const uint64_t end = request->offset + request->length;
      if (bytes.size() < end) bytes.resize(end);
      std::memcpy(bytes.data() + request->offset, request->buffer, request->length);
      request->transferred = request->length;
      Post({request, IoStatus::kOk, 0});
      return true;
    }
    case IoKind::kSync:  // an acknowledged PUT is durable: nothing to sync before it
      Post({request, IoStatus::kOk, 0});
      return true;
    case IoKind::kCommit:
      PublishTemp(request->file, request);
      return true;
  }
  return false;
}

void S3Device::PublishTemp(FileHandle temp, IoRequest* request) {
  auto it = temps_.find(temp);
  if (it == temps_.end()) {
    Post({request, IoStatus::kFailed, EBADF});
    return;
  }
  // The bytes live in a shared buffer until the PUT is answered; the temporary is gone from the
  // loop's table at once (AbortTemp after a failed commit finds nothing).
  auto bytes = std::make_shared<std::string>(std::move(it->second.bytes));
  const std::string stem = std::move(it->second.stem);
  temps_.erase(it);
  const std::string key = ObjectKey(stem);
  Mutate(key, [this, key, stem, bytes, request](std::function<void()> next) {
    auto put = [this, key, bytes, request, next](S3PutOptions options) {
      Tracked(
          [&](S3Client::Done done) {
            return client_->Put(key, bytes->data(), bytes->size(), std::move(options), std::move(done));
          },
          [this, bytes, request, next, key](const S3Result& r) {
            if (shared() && r.outcome == S3Outcome::kPreconditionFailed && !stopping_.load()) {
              // Another node's object stands: this node's marker goes.
              const std::string stem = key.substr(options_.prefix.size(), kStemLength);
              client_->Delete(MarkerKey(stem), [this](const S3Result& d) { Unanswered(d); });
            }
            Finish(request, r);
            next();
          });
    };
    if (!shared()) {
      put({});
      return;
    }
    S3PutOptions options;
    options.if_none_match = true;
    options.metadata = {{"kvstream-node", options_.node}};
    Tracked([&](S3Client::Done done) { return client_->Put(MarkerKey(stem), "", 0, {}, std::move(done)); },
            [this, request, next, put, options](const S3Result& r) {
              if (!r.ok() || stopping_.load()) {  // without its marker the object would be nobody's
                Finish(request, r);
                next();
                return;
              }
              put(options);
            });
  });
}

void S3Device::Tracked(const std::function<S3Client::RequestId(S3Client::Done)>& issue, S3Client::Done done) {
  auto id = std::make_shared<S3Client::RequestId>(0);
  absl::MutexLock lock(&writes_mu_);  // held while issuing: `done` cannot erase the id before it is in
  *id = issue([this, id, done = std::move(done)](const S3Result& r) mutable {
    {
      absl::MutexLock lock(&writes_mu_);
      writes_.erase(*id);
    }
    done(r);
  });
  writes_.insert(*id);
}

void S3Device::CancelWrites() const {
  std::vector<S3Client::RequestId> ids;
  {
    absl::MutexLock lock(&writes_mu_);
    ids.assign(writes_.begin(), writes_.end());
  }
  for (S3Client::RequestId id : ids) client_->Cancel(id);
}

absl::Status S3Device::RemoveChunk(const std::string& stem) {
  // Queued, not waited for: the loop goes on, and a publish of the key queued later waits for it.
  const std::string key = ObjectKey(stem);
  Mutate(key, [this, key, stem](std::function<void()> next) {
    Tracked([&](S3Client::Done done) { return client_->Delete(key, std::move(done)); },
            [this, stem, next](const S3Result& r) {
              Unanswered(r);
              if (!r.ok() && r.outcome != S3Outcome::kNotFound) {
                spdlog::warn("tier {}: removing {}: {}", options_.path, stem, r.message);
              } else if (shared() && !stopping_.load()) {
                client_->Delete(MarkerKey(stem), [this](const S3Result& d) { Unanswered(d); });
              }
              next();
            });
  });
  return absl::OkStatus();
}

void S3Device::Abandon(IoRequest* request) {
  request->abandoned = true;
  for (auto p = pending_reads_.begin(); p != pending_reads_.end(); ++p) {
    if (p->request == request) {  // not issued yet
      pending_reads_.erase(p);
      Post({request, IoStatus::kFailed, ECANCELED});
      return;
    }
  }
  auto it = in_flight_.find(request);
  if (it == in_flight_.end()) return;
  {
    // A part of a merged read: its bytes are copied out under mu_ only if it is not abandoned,
    // so marking it is final; the GET itself is cancelled once no part wants it.
    absl::MutexLock lock(&mu_);
    if (auto m = merged_of_.find(request); m != merged_of_.end()) {
      MergedRead& merged = *m->second;
      merged.abandoned.insert(request);
      if (merged.abandoned.size() == merged.parts.size()) client_->Cancel(it->second);
      return;
    }
  }
  client_->Cancel(it->second);
  // abandon_is_final: back only once its completion is posted, after which the client writes
  // nothing more into its buffer (a cancelled transfer is taken off curl on the client's thread
  // before `done` runs). The client's thread never waits for the loop, so this is short.
  absl::MutexLock lock(&mu_);
  while (running_.contains(request)) landed_.Wait(&mu_);
}

void S3Device::Submit() {
  if (pending_reads_.empty()) return;
  std::sort(pending_reads_.begin(), pending_reads_.end(), [](const PendingRead& a, const PendingRead& b) {
    return a.key != b.key ? a.key < b.key : a.request->offset < b.request->offset;
  });
  for (size_t first = 0; first < pending_reads_.size();) {
    // The run of reads of one object that follow each other, up to kMaxMergedReadBytes.
    size_t end = first + 1;
    uint64_t bytes = pending_reads_[first].request->length;
    while (end < pending_reads_.size() && pending_reads_[end].key == pending_reads_[first].key &&
           pending_reads_[end].request->offset == pending_reads_[end - 1].request->offset + pending_reads_[end - 1].request->length &&
           bytes + pending_reads_[end].request->length <= kMaxMergedReadBytes) {
      bytes += pending_reads_[end].request->length;
      ++end;
    }
    if (end - first == 1) {
      IssueRead(pending_reads_[first]);
    } else {
      IssueMergedRead(pending_reads_.begin() + first, pending_reads_.begin() + end, bytes);
    }
    first = end;
  }
  pending_reads_.clear();
}

void S3Device::IssueRead(const PendingRead& read) {
  IoRequest* request = read.request;
  {
    absl::MutexLock lock(&mu_);
    running_.insert(request);
  }
  in_flight_[request] = client_->Get(read.key, request->offset, request->length, request->buffer,
                                     [this, request](const S3Result& r) { Finish(request, r); });
}

void S3Device::IssueMergedRead(std::vector<PendingRead>::iterator first, std::vector<PendingRead>::iterator end,
                               uint64_t bytes) {
  auto merged = std::make_shared<MergedRead>();
  merged->buffer.reset(new uint8_t[bytes]);
  for (auto it = first; it != end; ++it) merged->parts.push_back(it->request);
  {
    absl::MutexLock lock(&mu_);
    for (IoRequest* part : merged->parts) merged_of_[part] = merged;
  }
  ++merged_reads_;
  const S3Client::RequestId id =
      client_->Get(first->key, first->request->offset, static_cast<uint32_t>(bytes), merged->buffer.get(),
                   [this, merged](const S3Result& r) { FinishMerged(*merged, r); });
  for (IoRequest* part : merged->parts) in_flight_[part] = id;
}

void S3Device::FinishMerged(MergedRead& merged, const S3Result& result) {
  Unanswered(result);
  {
    absl::MutexLock lock(&mu_);
    uint64_t at = 0;  // the part's place in the merged range
    for (IoRequest* part : merged.parts) {
      S3Result own = result;  // each part gets the bytes of its own range
      own.bytes = result.bytes > at ? std::min<uint64_t>(result.bytes - at, part->length) : 0;
      IoCompletion c = CompletionOf(part, own);
      if (merged.abandoned.contains(part)) {
        c = {part, IoStatus::kFailed, ECANCELED};  // its buffer is not written: Abandon was final
      } else if (c.status == IoStatus::kOk || c.status == IoStatus::kEndOfFile) {
        std::memcpy(part->buffer, merged.buffer.get() + at, part->transferred);
      }
      merged_of_.erase(part);
      ready_.push_back(c);
      at += part->length;
    }
  }
  Wake();
}

void S3Device::Reap(std::vector<IoCompletion>* out) {
  std::vector<IoCompletion> ready;
  {
    absl::MutexLock lock(&mu_);
    ready.swap(ready_);
  }
  for (const IoCompletion& c : ready) {
    in_flight_.erase(c.request);
    out->push_back(c);
  }
}

// --- Condition ------------------------------------------------------------------------------------

TierCondition S3Device::Condition() const {
  const int64_t now = MonotonicNs();
  const auto seconds = [](int64_t ns) { return static_cast<double>(ns) / 1e9; };
  const uint64_t answers = client_->answers();
  bool probe = false;
  TierCondition condition;
  {
    absl::MutexLock lock(&condition_mu_);
    if (answers != answers_seen_) {  // the store answered something (any status) since the last look
      answers_seen_ = answers;
      last_answer_ns_ = now;
      unanswered_since_ns_ = 0;
    }
    // Busy is not hung: a store that answers anything, even 503 SlowDown, is answering.
    const bool waiting = probe_in_flight_ || client_->in_flight() > 0;
    if (waiting && seconds(now - last_answer_ns_) >= options_.not_answering_seconds) {
      condition = {TierCondition::State::kNotAnswering,
                   absl::StrCat("the object store has not answered for ", static_cast<int>(seconds(now - last_answer_ns_)),
                                " s")};
    } else if (unanswered_since_ns_ != 0 && seconds(now - unanswered_since_ns_) >= options_.not_answering_seconds) {
      condition = {TierCondition::State::kNotAnswering,
                   absl::StrCat("the object store does not answer: ", unanswered_reason_)};
    }
    if (!probe_in_flight_ && seconds(now - last_probe_ns_) >= options_.probe_seconds) {
      probe_in_flight_ = true;
      last_probe_ns_ = now;
      probe = true;
    }
  }
  // Not answering: what it was writing fails now (its replicas are lost, counted and reported),
  // rather than when its requests time out after every attempt; no persist waits on it.
  if (condition.state == TierCondition::State::kNotAnswering) CancelWrites();
  if (probe) {
    auto* self = const_cast<S3Device*>(this);  // the probe's answer updates the condition
    self->client_->Get(absl::StrCat(options_.prefix, ".kvstream-probe"), 0, 1, &probe_byte_,
                       [self](const S3Result& r) {
                         self->Unanswered(r);
                         absl::MutexLock lock(&self->condition_mu_);
                         self->probe_in_flight_ = false;
                       });
  }
  return condition;
}

absl::Status S3Device::Recreate() { return absl::UnimplementedError("an s3 tier is never deleted"); }
absl::Status S3Device::Reopen() { return absl::UnimplementedError("an s3 tier is never detached"); }

}  // namespace kvstream
