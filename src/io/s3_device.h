// S3Device: a tier on an S3-compatible object store (s3/s3_client.h). Each chunk is one object,
// `<prefix><stem>.kvc`, holding the chunk file's bytes exactly (header, segments, padding: the same
// format and MAC as a file tier's). Reads are ranged GETs of the blocks completion routing hands
// the tier, many in flight; a replica is assembled in memory by its writes and published by one
// queued kCommit (a PUT, multipart when large), so the I/O loop never waits for the store. An
// acknowledged PUT is durable (DeviceProperties::durable_commit).
//
// Shared (S3DeviceOptions::node set): every node's daemon uses the same prefix. A node publishes
// with If-None-Match (the first node's object stands: kExists) after a marker of its own,
// `<prefix>.nodes/<node>/<stem>`, which says the object is the node's: Scan, ListChunks and the
// saved index cover the objects with the node's marker; RemoveChunk removes the node's object and
// its marker. A private tier's prefix belongs to one daemon.
//
// Every byte from the store is hostile: headers are decoded by the one decoder and checked against
// the object's size and (with a cluster key) its MAC, object names that are not chunk names are
// ignored, and every block read is verified by the engine as from any tier.
//
// The condition: a probe request about once a second (a GET of a key that need not exist); when
// requests are in flight and no HTTP answer of any status (503 SlowDown too: busy is not hung) came
// for `not_answering_seconds`, or the last requests failed without one for that long (refused,
// timed out), the tier is kNotAnswering, usable again at the next answer. Never blocks the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_mac.h"
#include "io/tier_device.h"
#include "s3/s3_client.h"

namespace kvstream {

struct S3DeviceOptions {
  S3ClientOptions client;  // endpoint, bucket, region, credentials, timeouts; max_in_flight is set
  std::string prefix;      // "" or ending in '/'
  std::string path;        // s3://bucket/prefix, for messages
  uint32_t read_depth = 16;
  uint32_t write_depth = 3;
  int event_fd = -1;       // written (eventfd) when completions are ready
  std::string node;        // non-empty: a shared tier, and this node's name
  std::shared_ptr<const ChunkMacKey> mac_key;
  bool require_mac = false;
  double not_answering_seconds = 1.0;
  double probe_seconds = 1.0;           // how often Condition probes the store
  size_t max_listed_objects = 64u << 20;  // a listing longer than this fails Scan and ListChunks
};

class S3Device final : public TierDevice {
 public:
  // Starts the client and checks the bucket (HEAD bucket): wrong credentials, a missing bucket or
  // an unreachable endpoint are an error naming which.
  static absl::StatusOr<std::unique_ptr<S3Device>> Open(S3DeviceOptions options);
  ~S3Device() override;

  const DeviceProperties& properties() const override { return props_; }
  absl::StatusOr<ScanReport> Scan() override;
  absl::Status SaveIndex(const std::vector<ChunkMeta>& chunks) override;
  absl::StatusOr<std::vector<ListedChunk>> ListChunks() override;
  absl::StatusOr<ScannedChunk> ReadChunkHeader(const std::string& stem) override;
  absl::StatusOr<uint64_t> ChunkFileSize(const std::string& stem) override;
  absl::StatusOr<FileHandle> OpenChunk(const std::string& stem) override;
  absl::StatusOr<FileHandle> CreateTemp(const std::string& stem) override;
  absl::Status CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) override;
  void AbortTemp(FileHandle temp) override;
  absl::Status RemoveChunk(const std::string& stem) override;
  TierCondition Condition() const override;
  absl::Status Recreate() override;
  absl::Status Reopen() override;
  bool Queue(IoRequest* request) override;
  void Abandon(IoRequest* request) override;
  void Submit() override;
  void Reap(std::vector<IoCompletion>* out) override;
  absl::StatusOr<int> RegisterRegion(void*, size_t) override {
    return absl::UnimplementedError("an object store has no registered buffers");
  }
  void UnregisterRegion(int) override {}
  uint64_t resubmits() const override;
  uint64_t fixed_ops() const override { return 0; }

  S3Client& client() { return *client_; }

 private:
  explicit S3Device(S3DeviceOptions options) : options_(std::move(options)) {}
  bool shared() const { return !options_.node.empty(); }
  std::string ObjectKey(const std::string& stem) const;
  std::string MarkerKey(const std::string& stem) const;  // shared only
  std::string IndexKey() const;
  // Decodes a header read from the start of an object of `object_size` bytes named `stem`.
  absl::StatusOr<ScannedChunk> DecodeObjectHeader(const std::string& stem, const std::string& bytes,
                                                  uint64_t object_size) const;
  // The header of the object of `stem`, `object_size` bytes long (0: unknown, taken from the
  // answer). `bytes`: its first bytes when already read (a scan's batch); read here otherwise, and
  // the whole header read again only when it is longer than those.
  absl::StatusOr<ScannedChunk> FetchHeader(const std::string& stem, uint64_t object_size, std::string bytes = {});
  // Listing: this node's chunk objects (a private tier's all; a shared tier's those with the node's
  // marker) and, shared, the node's markers whose object is missing (a publish cut short).
  struct Listing {
    std::vector<ListedChunk> own;
    std::vector<std::string> orphan_markers;
  };
  absl::StatusOr<Listing> List();
  // Completes `request` from `result` (on the client's thread).
  void Finish(IoRequest* request, const S3Result& result);
  void Post(const IoCompletion& completion);
  void Wake();  // the loop's eventfd
  // A request or probe ended without an HTTP answer (unreachable, timed out): toward kNotAnswering
  // (answers are counted by S3Client::answers, which Condition reads).
  void Unanswered(const S3Result& result);
  // Mutations of one object (a publish, a removal) run one at a time, in the order queued: a
  // removal queued before a new replica's publish never lands after it. A mutation calls `next`
  // once its last request is answered (on the client's thread), which starts the one after it.
  using Mutation = std::function<void(std::function<void()> next)>;
  void Mutate(const std::string& key, Mutation start);
  void StartMutation(const std::string& key);
  void EndMutation(const std::string& key);
  void PublishTemp(FileHandle temp, IoRequest* request);
  // Reads queued since the last Submit, with their object's key.
  struct PendingRead {
    IoRequest* request;
    std::string key;
  };
  // Reads of adjacent blocks of one object queued together go out as one ranged GET into a buffer
  // of its own, copied into each part's buffer when it lands (a part abandoned meanwhile is not).
  struct MergedRead {
    std::vector<IoRequest*> parts;  // in offset order
    std::unique_ptr<uint8_t[]> buffer;  // not zeroed: the GET fills what is copied out
    absl::flat_hash_set<IoRequest*> abandoned;  // guarded by mu_
  };
  void IssueRead(const PendingRead& read);
  void IssueMergedRead(std::vector<PendingRead>::iterator first, std::vector<PendingRead>::iterator end, uint64_t bytes);
  void FinishMerged(MergedRead& merged, const S3Result& result);
  // Issues a PUT or DELETE (`issue` calls the client with the `done` it is given) and remembers it
  // until answered, so that CancelWrites can cancel it: a tier that stops answering fails what it
  // was writing at once instead of after every attempt's timeout.
  void Tracked(const std::function<S3Client::RequestId(S3Client::Done)>& issue, S3Client::Done done);
  void CancelWrites() const;

  S3DeviceOptions options_;
  DeviceProperties props_;
  std::unique_ptr<S3Client> client_;

  // Loop state.
  struct Temp {
    std::string stem;
    std::string bytes;  // the object as its writes assemble it
  };
  absl::flat_hash_map<FileHandle, Temp> temps_;
  absl::flat_hash_map<FileHandle, std::string> read_keys_;  // open handle -> object key
  absl::flat_hash_map<std::string, FileHandle> handle_of_;  // object key -> open handle
  absl::flat_hash_map<IoRequest*, S3Client::RequestId> in_flight_;
  std::vector<PendingRead> pending_reads_;
  uint64_t merged_reads_ = 0;
  FileHandle next_handle_ = 1;

  // Between the client's thread and the loop.
  absl::Mutex mu_;
  std::vector<IoCompletion> ready_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<IoRequest*> running_ ABSL_GUARDED_BY(mu_);  // reads whose completion is not posted yet
  absl::CondVar landed_;  // a read's completion was posted
  absl::flat_hash_map<IoRequest*, std::shared_ptr<MergedRead>> merged_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::deque<Mutation>> mutations_
      ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex writes_mu_;
  absl::flat_hash_set<S3Client::RequestId> writes_ ABSL_GUARDED_BY(writes_mu_);  // PUTs and DELETEs in flight

  // The condition (Condition is const; the probe's state is not).
  mutable absl::Mutex condition_mu_;
  mutable int64_t last_probe_ns_ ABSL_GUARDED_BY(condition_mu_) = 0;
  mutable bool probe_in_flight_ ABSL_GUARDED_BY(condition_mu_) = false;
  mutable int64_t unanswered_since_ns_ ABSL_GUARDED_BY(condition_mu_) = 0;  // 0: answered since the last failure
  mutable uint64_t answers_seen_ ABSL_GUARDED_BY(condition_mu_) = 0;  // S3Client::answers() at the last look
  mutable int64_t last_answer_ns_ ABSL_GUARDED_BY(condition_mu_) = 0;  // when it last moved
  std::string unanswered_reason_ ABSL_GUARDED_BY(condition_mu_);
  mutable char probe_byte_ = 0;
  std::atomic<bool> stopping_{false};  // set by the destructor: callbacks issue no more requests
};

}  // namespace kvstream
