#include "write/replicator.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {

Replicator::Replicator(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, WriteStager* stager,
                       Reactor* reactor, StoreCounters* counters)
    : config_(config),
      tiers_(tiers),
      index_(index),
      stager_(stager),
      reactor_(reactor),
      counters_(counters),
      replication_(config.replication),
      slots_(tiers.size()),
      next_drive_(tiers.empty() ? 0 : tiers.back()->group + 1) {
  for (size_t t = 0; t < tiers.size(); ++t) {
    // One more slot than writes in flight: the fsync of a finished replica.
    slots_[t].slots = std::vector<WriteSlot>(tiers[t]->write_depth + 1);
    for (uint32_t i = tiers[t]->write_depth + 1; i > 0; --i) slots_[t].free.push_back(i - 1);
  }
}

void Replicator::Add(std::unique_ptr<StagedChunk> chunk) {
  auto job = std::make_unique<Job>();
  job->chunk = std::move(chunk);
  jobs_.push_back(std::move(job));
  ++unacknowledged_;
}

// Which tiers need a replica (M3), and which already hold these bytes.
void Replicator::Start(Job* job) {
  job->started = true;
  job->adaptive = replication_ == ReplicationPolicy::kAdaptive;
  job->replicas.resize(tiers_.size());
  const ChunkMeta& meta = *job->chunk->meta;
  absl::MutexLock lock(&index_->mu());
  const IndexEntry* e = index_->get().FindLive(meta.key);
  const bool same = e != nullptr && e->meta->payload_checksum == meta.payload_checksum &&
                    e->meta->payload_size == meta.payload_size;
  // The replicas that answer for this write as they are: under fsync chunk, only those this node
  // synced (or another node's, which cannot be rewritten); one found unsynced is written again.
  const uint32_t reusable =
      !same ? 0 : config_.fsync == FsyncPolicy::kChunk ? e->tiers & (e->synced | e->foreign) : e->tiers;
  for (size_t k = 0; k < tiers_.size(); ++k) {
    const Tier& tier = *tiers_[k];
    if (k > 0 && tiers_[k - 1]->group == tier.group) continue;  // one replica per group, decided at its first drive
    if (replication_ == ReplicationPolicy::kPrimary && tier.group != 0) continue;
    if (reusable & tier.group_mask) {
      job->written |= reusable & tier.group_mask;  // already there, byte-identical
      job->synced |= e->synced & tier.group_mask;
    } else {
      Replica& r = job->replicas[ChooseDrive(static_cast<int>(k))];
      r.state = State::kPending;
      r.secondary = job->adaptive && tier.group != 0;
    }
  }
}

int Replicator::ChooseDrive(int first) {
  const uint32_t mask = tiers_[first]->group_mask;
  const int drives = std::popcount(mask);
  if (drives == 1) return first;
  uint32_t& next = next_drive_[tiers_[first]->group];
  for (int i = 0; i < drives; ++i) {
    const int d = first + static_cast<int>(next++ % drives);
    if (tiers_[d]->writable) return d;
  }
  return first + static_cast<int>(next++ % drives);  // none is writable: fails there, saying why
}

bool Replicator::AbandonSecondaries(Job* job) {
  bool abandoned = false;
  for (size_t t = 0; t < job->replicas.size(); ++t) {
    Replica& r = job->replicas[t];
    if (!r.secondary || r.in_flight > 0) continue;
    if (r.state == State::kWriting) {  // started, paused: its temporary and its room go back
      tiers_[t]->device->AbortTemp(r.temp);
      absl::MutexLock lock(&index_->mu());
      index_->get().Release(static_cast<int>(t), job->chunk->image_size);
    } else if (r.state != State::kPending) {
      continue;
    }
    r.state = State::kDone;  // absent, not lost
    abandoned = true;
    ++tiers_[t]->counters.secondaries_dropped;
  }
  return abandoned;
}

void Replicator::DropSecondaries() {
  for (size_t j = 0; j < jobs_.size();) {
    Job* job = jobs_[j].get();
    const size_t before = jobs_.size();
    // Only once answered: the chunk is written on its primary.
    if (job->acknowledged && AbandonSecondaries(job)) MaybeFinish(job);
    if (jobs_.size() == before) ++j;
  }
}

void Replicator::Schedule(int t, bool during_reads) {
  const bool pressure = stager_->filling();
  if (pressure) DropSecondaries();
  // Secondaries are background work: none starts while any chunk still waits for its primary
  // (their writes would take device, CPU and memory bandwidth the primaries need).
  const bool primaries_pending = unacknowledged_ > 0;
  // Jobs are taken oldest first; every write slot of the tier may go to the same job.
  for (size_t j = 0; j < jobs_.size() && slots_[t].free.size() > 1; ++j) {
    Job* job = jobs_[j].get();
    if (!job->started) Start(job);
    Replica& r = job->replicas[t];
    // A secondary is written only while the node is otherwise idle (no reads, no staging
    // pressure, no primary still to write): it does not start, and a started one issues no new
    // piece, so it yields the device within the pieces already in flight.
    if (r.secondary && (during_reads || pressure || primaries_pending)) continue;
    if (r.state == State::kPending && !StartReplica(job, t)) continue;
    IssueWrites(job, t, during_reads);
  }
  // Jobs that needed nothing (every replica already present) or whose replicas all failed to start.
  for (size_t j = 0; j < jobs_.size();) {
    const size_t before = jobs_.size();
    MaybeFinish(jobs_[j].get());
    if (jobs_.size() == before) ++j;
  }
}

bool Replicator::StartReplica(Job* job, int t) {
  Tier& tier = *tiers_[t];
  const StagedChunk& chunk = *job->chunk;
  if (!tier.writable) {
    std::string condition;
    {
      absl::MutexLock lock(&tier.condition_mu);  // only to read it: FinishReplica takes the index's lock
      condition = tier.condition;
    }
    FinishReplica(job, t, absl::UnavailableError(absl::StrCat("tier ", tier.name, ": ", condition)));
    return false;
  }
  absl::StatusOr<FileHandle> temp = tier.device->CreateTemp(chunk.stem);
  if (!temp.ok()) {
    WriteFailed(t, temp.status());
    FinishReplica(job, t, temp.status());
    return false;
  }
  std::vector<Victim> victims;
  bool room;
  const int64_t now_ns = reactor_->NowNs();
  {
    absl::MutexLock lock(&index_->mu());
    Index& index = index_->get();
    room = index.MakeRoom(t, chunk.image_size, now_ns, &victims, chunk.meta->key);
    if (room) index.Reserve(t, chunk.image_size);
  }
  tier.counters.evictions += victims.size();
  RemoveReplicaFiles(tiers_, victims);
  if (!room) {
    tier.device->AbortTemp(*temp);
    FinishReplica(job, t, absl::ResourceExhaustedError(absl::StrCat("tier ", tier.name, " cannot make room for ",
                                                                    chunk.image_size, " bytes")));
    return false;
  }
  Replica& r = job->replicas[t];
  r.temp = *temp;
  r.next_offset = 0;
  r.state = State::kWriting;
  return true;
}

// Queues the next pieces of the replica, keeping one slot free for a sync.
void Replicator::IssueWrites(Job* job, int t, bool during_reads) {
  Replica& r = job->replicas[t];
  TierSlots& ts = slots_[t];
  const StagedChunk& chunk = *job->chunk;
  while (r.state == State::kWriting && r.next_offset < chunk.image_size && ts.free.size() > 1) {
    WriteSlot& slot = ts.slots[ts.free.back()];
    ts.free.pop_back();
    slot.job = job;
    const uint32_t length = static_cast<uint32_t>(std::min<uint64_t>(config_.block_size, chunk.image_size - r.next_offset));
    slot.Set(IoKind::kWrite, r.temp, r.next_offset, length, chunk.image.get() + r.next_offset);
    slot.issued = std::chrono::steady_clock::now();
    tiers_[t]->device->Queue(&slot);
    r.next_offset += length;
    ++r.in_flight;
    if (during_reads) ++counters_->writes_under_pressure;
  }
}

void Replicator::Complete(int t, const IoCompletion& c) {
  Tier& tier = *tiers_[t];
  auto& slot = static_cast<WriteSlot&>(*c.request);
  TierSlots& ts = slots_[t];
  ts.free.push_back(static_cast<uint32_t>(&slot - ts.slots.data()));
  Job* job = slot.job;
  Replica& r = job->replicas[t];
  --r.in_flight;
  if (slot.kind == IoKind::kWrite) {
    tier.counters.write_seconds.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - slot.issued).count());
  }
  if (slot.kind == IoKind::kCommit) {  // the device's answer to Commit's queued publish
    if (c.status == IoStatus::kExists) {
      PublishedElsewhere(job, t);
    } else if (c.status != IoStatus::kOk) {
      tier.device->AbortTemp(r.temp);
      Committed(job, t, ErrnoStatus(c.error, absl::StrCat("publishing on tier ", tier.name, " failed")));
    } else {
      Committed(job, t, absl::OkStatus());
    }
    return;
  }
  if (c.status != IoStatus::kOk && r.error.ok()) {
    r.error = ErrnoStatus(c.error, absl::StrCat("write to tier ", tier.name, " failed"));
    WriteFailed(t, r.error);
  }
  if (r.in_flight > 0) return;
  if (!r.error.ok()) {
    tier.device->AbortTemp(r.temp);
    {
      absl::MutexLock lock(&index_->mu());
      index_->get().Release(t, job->chunk->image_size);
    }
    FinishReplica(job, t, r.error);
    return;
  }
  if (r.state == State::kWriting && r.next_offset < job->chunk->image_size) return;  // more to write
  if (r.state == State::kWriting && config_.fsync == FsyncPolicy::kChunk) {
    WriteSlot& sync = ts.slots[ts.free.back()];
    ts.free.pop_back();
    sync.job = job;
    sync.Set(IoKind::kSync, r.temp, 0, 0, nullptr);
    tier.device->Queue(&sync);
    r.state = State::kSyncing;
    ++r.in_flight;
    return;
  }
  Commit(job, t);
}

void Replicator::Commit(Job* job, int t) {
  Tier& tier = *tiers_[t];
  Replica& r = job->replicas[t];
  const StagedChunk& chunk = *job->chunk;
  bool superseded;
  {
    // Writes of one key may complete out of order: never rename an older version over a newer.
    absl::MutexLock lock(&index_->mu());
    const IndexEntry* e = index_->get().Find(chunk.meta->key);
    // Only this node's own copies count: another node's clock says nothing of the order here.
    superseded = e != nullptr && e->own() != 0 && e->meta->created_unix_ns > chunk.meta->created_unix_ns &&
                 e->meta->payload_checksum != chunk.meta->payload_checksum;
    if (superseded) index_->get().Release(t, chunk.image_size);
  }
  if (superseded) {
    tier.device->AbortTemp(r.temp);
    FinishReplica(job, t, absl::OkStatus());  // done, not written: a newer write holds the key
    return;
  }
  if (tier.device->properties().async_commit) {  // answered in Complete
    TierSlots& ts = slots_[t];
    WriteSlot& slot = ts.slots[ts.free.back()];
    ts.free.pop_back();
    slot.job = job;
    slot.Set(IoKind::kCommit, r.temp, 0, 0, nullptr);
    slot.issued = std::chrono::steady_clock::now();
    tier.device->Queue(&slot);
    r.state = State::kCommitting;
    ++r.in_flight;
    return;
  }
  absl::Status committed = tier.device->CommitTemp(r.temp, chunk.stem, config_.fsync == FsyncPolicy::kChunk);
  if (absl::IsAlreadyExists(committed)) {
    PublishedElsewhere(job, t);
    return;
  }
  Committed(job, t, committed);
}

void Replicator::Committed(Job* job, int t, const absl::Status& committed) {
  Tier& tier = *tiers_[t];
  const StagedChunk& chunk = *job->chunk;
  const bool sync = config_.fsync == FsyncPolicy::kChunk || tier.device->properties().durable_commit;
  std::vector<Victim> stale;
  {
    absl::MutexLock lock(&index_->mu());
    index_->get().Release(t, chunk.image_size);
    if (committed.ok()) {
      stale = index_->get().AddReplica(t, chunk.meta, /*foreign=*/false, sync);
      MoveStagedLocks(chunk.meta->key);
    }
  }
  RemoveReplicaFiles(tiers_, stale);
  if (committed.ok()) {
    tier.counters.bytes_written += chunk.image_size;
    ++tier.counters.replicas_written;
    job->written |= 1u << t;
    if (sync) job->synced |= 1u << t;
  } else {
    WriteFailed(t, committed);
  }
  FinishReplica(job, t, committed);
}

void Replicator::PublishedElsewhere(Job* job, int t) {
  const StagedChunk& chunk = *job->chunk;
  absl::StatusOr<ScannedChunk> theirs = tiers_[t]->device->ReadChunkHeader(chunk.stem);
  // Same payload in the same segments: their file serves this node's version too.
  const bool same = theirs.ok() && theirs->meta.key == chunk.meta->key && VersionOf(theirs->meta) == VersionOf(*chunk.meta);
  std::vector<Victim> stale;
  {
    absl::MutexLock lock(&index_->mu());
    index_->get().Release(t, chunk.image_size);
    if (same) {
      stale = index_->get().AddReplica(t, chunk.meta, /*foreign=*/true);
      MoveStagedLocks(chunk.meta->key);
    }
  }
  RemoveReplicaFiles(tiers_, stale);
  // The same bytes: the tier holds the chunk (another node's file). Another version: the key is
  // served from this node's other copies of its own version; the tier keeps the other node's.
  if (same) job->written |= 1u << t;  // not synced: another node's file, not known to be
  FinishReplica(job, t, absl::OkStatus());
}

void Replicator::WriteFailed(int t, const absl::Status& why) {
  Tier& tier = *tiers_[t];
  ++tier.counters.write_errors;
  tier.counters.CountError(IoStatusOf(why));
  uint64_t left_out;
  if (tier.write_log.Allow(&left_out)) {
    spdlog::warn("tier {}: a replica is lost: {}{}", tier.name, std::string(why.message()),
                 left_out ? absl::StrCat(" (", left_out, " more write failures not logged)") : "");
  }
}

void Replicator::FinishReplica(Job* job, int t, absl::Status status) {
  Replica& r = job->replicas[t];
  r.state = status.ok() ? State::kDone : State::kFailed;
  if (!status.ok() && !r.secondary) {
    // The primary is lost: the copies meant as secondaries are what the chunk's durability rests
    // on now, so they are written like any replica and never dropped.
    for (Replica& other : job->replicas) other.secondary = false;
  } else if (job->adaptive && !r.secondary && (job->written & (1u << t)) == 0) {
    // The primary was superseded (a newer version of the key committed first): copies of this
    // version are of no use, and the job is answered (tier_mask 0) once those in flight are done.
    AbandonSecondaries(job);
  }
  r.error = std::move(status);
  MaybeFinish(job);
}

void Replicator::MaybeFinish(Job* job) {
  if (!job->started) return;
  absl::Status first_error;
  PersistResult result;
  bool all_done = true, primary_written = false;
  for (size_t t = 0; t < job->replicas.size(); ++t) {
    const Replica& r = job->replicas[t];
    const bool done = r.state == State::kDone || r.state == State::kFailed;
    all_done &= done;
    primary_written |= job->adaptive && !r.secondary && (job->written & (1u << t)) != 0;
    if (r.state != State::kFailed) continue;
    result.lost_mask |= 1u << t;
    if (first_error.ok()) first_error = r.error;
  }
  if (all_done) {
    {
      absl::MutexLock lock(&index_->mu());  // locks taken since its commit, or on another version's
      MoveStagedLocks(job->chunk->meta->key);
    }
    stager_->Unlist(*job->chunk);  // out of lookups' sight before its persist is answered (and Flush returns)
  }
  if (!job->acknowledged && (all_done || primary_written)) {
    result.tier_mask = job->written;
    result.synced_mask = job->synced & job->written;
    result.status = job->written != 0 ? absl::OkStatus() : first_error;
    if (result.lost_mask != 0) result.lost_reason = std::string(first_error.message());
    job->acknowledged = true;
    --unacknowledged_;
    stager_->Acknowledge(job->chunk.get(), result);
  }
  if (!all_done) return;
  auto it = std::find_if(jobs_.begin(), jobs_.end(), [job](const auto& j) { return j.get() == job; });
  std::unique_ptr<Job> owned = std::move(*it);
  jobs_.erase(it);
  stager_->Release(std::move(owned->chunk));
}

void Replicator::MoveStagedLocks(const std::string& key) {
  IndexEntry* e = index_->get().Find(key);
  if (e == nullptr || e->tiers == 0) return;  // nowhere to move them: they end with the staging
  const StagedLocks locks = stager_->TakeLocks(key);
  // One Lock each, as if taken on the entry: past the tenant's locked bytes, the rest end here
  // (the chunk stays, evictable like any unlocked one).
  const int64_t now = reactor_->NowNs();
  for (uint32_t i = 0; i < locks.count && index_->get().Lock(e, locks.until_ns, now); ++i) {
  }
}

}  // namespace kvstream
