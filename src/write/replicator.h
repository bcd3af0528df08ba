// Replicator (M3): writes each staged chunk to its target tiers (every tier under `all`, the first
// under `primary`; on a tier over several drives, one of its drives), skipping tiers that already
// hold the same bytes (under fsync chunk, bytes this node synced). Under `adaptive` the first
// tier's copy is the primary and the others are secondaries: the persist is answered once the
// primary is written (or, if it failed, once every copy is done), secondaries are written only
// when the node is otherwise idle (no reads pending, no primary left to write, no staging
// pressure: a started one pauses between pieces), and those with no write in flight are dropped
// once staging fills past half its high-water mark, so a secondary never stalls a step or a
// producer by more than its pieces in flight, nor pushes staging into pressure. Each replica is
// written to a temporary file in block-size pieces, synced when the fsync policy asks, and renamed
// into place only if no newer version of the key was committed meanwhile (writes of one key may
// complete out of order). Room is made (LRU eviction) before a replica starts. A chunk is finished, and its
// persist callback told which tiers hold it and which of those synced it, once every replica is
// written or failed. Loop thread
// only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "index/index.h"
#include "io/reactor.h"
#include "io/tier.h"
#include "kvstream/config.h"
#include "write/write_stager.h"

namespace kvstream {

class Replicator {
 public:
  // `reactor` is the store's clock (for the locks' leases when room is made).
  Replicator(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, WriteStager* stager,
             Reactor* reactor, StoreCounters* counters);

  void Add(std::unique_ptr<StagedChunk> chunk);
  // The replication policy for chunks started from now on (StoreConfig::replication at first).
  void set_replication(ReplicationPolicy replication) { replication_ = replication; }
  // Starts replicas and issues writes on `tier` while it has free write slots. `during_reads`
  // counts them as writes under pressure.
  void Schedule(int tier, bool during_reads);
  // A write or sync issued by this replicator completed on `tier`.
  void Complete(int tier, const IoCompletion& completion);

  bool idle() const { return jobs_.empty(); }

 private:
  enum class State { kPending, kWriting, kSyncing, kCommitting, kDone, kFailed };
  struct Replica {
    State state = State::kDone;  // tiers not targeted count as done-and-absent
    bool secondary = false;      // adaptive: a copy beyond the primary, written when idle
    FileHandle temp = -1;
    uint64_t next_offset = 0;
    uint32_t in_flight = 0;
    absl::Status error;
  };
  struct Job {
    std::unique_ptr<StagedChunk> chunk;
    std::vector<Replica> replicas;  // per tier
    bool started = false;
    bool acknowledged = false;  // its persist was answered (WriteStager::Acknowledge)
    bool adaptive = false;      // answered once its primary is written; secondaries may be dropped
    uint32_t written = 0;  // tiers whose replica of this version is written
    uint32_t synced = 0;   // ... and synced (IndexEntry::synced): it survives a power cut
  };
  struct WriteSlot : IoRequest {
    Job* job = nullptr;
    std::chrono::steady_clock::time_point issued;
  };
  struct TierSlots {
    std::vector<WriteSlot> slots;
    std::vector<uint32_t> free;
  };

  void Start(Job* job);
  // The drive of the group whose first drive is tier `first` that a new replica goes to: its
  // writable drives in turn, so consecutive chunks (a prefix, a step) spread over every drive and
  // equal drives fill equally.
  int ChooseDrive(int first);
  bool StartReplica(Job* job, int tier);
  void IssueWrites(Job* job, int tier, bool during_reads);
  // Publishes a written (and synced) replica: CommitTemp, or a queued IoKind::kCommit on a device
  // with async_commit (Committed runs when it completes).
  void Commit(Job* job, int tier);
  void Committed(Job* job, int tier, const absl::Status& committed);
  // A shared tier's commit found the key published by another node first: its file stands, and
  // holds the chunk for this node too when it has the same bytes.
  void PublishedElsewhere(Job* job, int tier);
  // Counts and logs (rate-limited) a failed write, temporary or commit on `tier`.
  void WriteFailed(int tier, const absl::Status& why);
  void FinishReplica(Job* job, int tier, absl::Status status);
  // Answers the job's persist once its copies promise what it needs (all of them, or the primary
  // under adaptive), and finishes the job once no replica is pending or in flight.
  void MaybeFinish(Job* job);
  // Staging is under pressure: secondaries of answered jobs with no write in flight are dropped.
  void DropSecondaries();
  // Locks lookups took on `key` while only staging held it move onto its index entry, if live.
  void MoveStagedLocks(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_->mu());
  // Gives up the job's secondaries with no write in flight (a started one gives back its
  // temporary and its reserved room); counted as dropped. True if any was.
  bool AbandonSecondaries(Job* job);

  const StoreConfig& config_;
  const Tiers& tiers_;
  GuardedIndex* index_;
  WriteStager* stager_;
  Reactor* reactor_;
  StoreCounters* counters_;
  ReplicationPolicy replication_;
  std::vector<TierSlots> slots_;  // per tier
  std::vector<uint32_t> next_drive_;  // per group: where ChooseDrive looks first
  std::deque<std::unique_ptr<Job>> jobs_;  // oldest first
  size_t unacknowledged_ = 0;              // jobs whose persist is not answered yet
};

}  // namespace kvstream
