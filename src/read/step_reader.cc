#include "read/step_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "util/unix_time.h"

namespace kvstream {

StepReader::StepReader(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index,
                       const WriteStager* staging, StepPool* pool, MemoryRegions* regions, Reactor* reactor,
                       StoreCounters* counters, StepFinished on_step_finished)
    : config_(config),
      tiers_(tiers),
      index_(index),
      staging_(staging),
      pool_(pool),
      regions_(regions),
      reactor_(reactor),
      counters_(counters),
      on_step_finished_(std::move(on_step_finished)),
      deadlines_(config, tiers.size()),
      pace_(tiers.size()),
      reference_(tiers.size()) {}

absl::Status StepReader::Init() {
  const size_t block = config_.block_size;
  reads_.resize(tiers_.size());
  for (size_t t = 0; t < tiers_.size(); ++t) {
    Tier& tier = *tiers_[t];
    TierReads& ts = reads_[t];
    tier_names_.push_back(tier.name);
    ts.slots = std::vector<ReadSlot>(tier.read_depth);
    ts.depth = DepthTuner(tier.read_depth_now, tier.read_depth);
    ts.settled_depth = tier.read_depth_now;
    for (uint32_t i = tier.read_depth; i > 0; --i) ts.free.push_back(i - 1);
    ts.bounce_pool = AllocateAligned(block * tier.read_depth);
    if (!ts.bounce_pool) return absl::ResourceExhaustedError("cannot allocate bounce buffers");
    for (uint32_t i = 0; i < tier.read_depth; ++i) ts.slots[i].bounce = ts.bounce_pool.get() + i * block;
    if (tier.device->properties().fixed_buffers) {
      auto region = tier.device->RegisterRegion(ts.bounce_pool.get(), block * tier.read_depth);
      if (!region.ok()) {
        spdlog::info("tier {}: bounce buffers not registered: {}", tier.name, std::string(region.status().message()));
      }
    }
  }
  const int threads = !config_.verify_checksums ? 0
                      : config_.verify_threads < 0 ? BlockVerifier::AutoThreads()
                                                   : config_.verify_threads;
  verifier_ = std::make_unique<BlockVerifier>(threads, reactor_);
  return absl::OkStatus();
}

int64_t StepReader::Schedule(int t) {
  TierReads& ts = reads_[t];
  if (deadlines_.stalled(t) || !tiers_[t]->readable) {  // stalled or out of reach
    ts.depth.SetBacklogged(false, reactor_->NowNs());
    return kNoDeadline;
  }
  BlockRef ref;
  while (HasRoom(t) && pool_->Claim(t, &ref)) {
    if (LeavesToOthers(t, ref)) {
      if (!pool_->Unclaim(ref, t)) ++tiers_[t]->counters.tail_blocks_left;
      // The others finish the step sooner: nothing to take over either. (Its next claim would
      // find this block first again, so `t` claims nothing more until a read lands.)
      ts.depth.SetBacklogged(false, reactor_->NowNs());
      return kNoDeadline;
    }
    if (!Issue(t, ref)) break;
  }
  // Out of room with blocks still unclaimed: what it reads now is what its depth allows.
  const bool room = HasRoom(t);
  ts.depth.SetBacklogged(!room && pool_->unclaimed() > 0, reactor_->NowNs());
  if (!room) return kNoDeadline;
  int64_t recheck = kNoDeadline;
  while (HasRoom(t) && HedgeTail(t, &recheck)) {
    while (HasRoom(t) && pool_->Claim(t, &ref)) {
      if (!Issue(t, ref)) return recheck;
    }
  }
  return recheck;
}

void StepReader::TuneDepth(int t, uint32_t bytes, int64_t now) {
  Tier& tier = *tiers_[t];
  DepthTuner& depth = reads_[t].depth;
  std::string why;
  if (!depth.Landed(bytes, now, &why)) return;
  tier.read_depth_now.store(depth.depth(), std::memory_order_relaxed);
  // A depth settled at another value than before is news; trials and re-probes are not.
  uint32_t& settled = reads_[t].settled_depth;
  if (!depth.trying() && depth.depth() != settled) {
    spdlog::info("tier {}: read queue depth {} (was {})", tier.name, why, settled);
    settled = depth.depth();
  } else {
    spdlog::debug("tier {}: read queue depth {}", tier.name, why);
  }
}

bool StepReader::reads_pending() const {
  if (pool_->empty()) return false;  // reads still in flight serve no pending step (hedged ones)
  for (size_t t = 0; t < reads_.size(); ++t) {
    if (!deadlines_.stalled(static_cast<int>(t)) && reads_[t].free.size() < reads_[t].slots.size()) return true;
  }
  return false;
}

bool StepReader::Issue(int t, BlockRef ref) {
  Tier& tier = *tiers_[t];
  auto* step = static_cast<ReadStep*>(ref.step);
  const StepBlock& blk = step->blocks[ref.block];
  const ReadChunk& c = step->reads[blk.chunk];
  const ChunkMeta& meta = *c.meta;
  absl::StatusOr<FileHandle> file = tier.device->OpenChunk(c.stem);
  if (NotAnswering(file.status())) {
    // Its file system did not answer the open in time: the block is left to another holder (or
    // to a later turn), the tier claims nothing more this turn; past not_answering it is stalled.
    pool_->Unclaim(ref, t);
    return false;
  }
  if (!file.ok()) {
    // A missing file is a lost replica; other errors (EMFILE, ENOMEM...) only fail over.
    ReadFailed(t, step, ref, std::string(file.status().message()), IoStatusOf(file.status()),
               absl::IsNotFound(file.status()) ? ReadFault::kAbsent : ReadFault::kError);
    return true;
  }
  if (!tier.device->HoldsVersion(*file, meta)) {  // another node replaced the file under its name
    ReadFailed(t, step, ref, "the file holds another version now", IoStatus::kGone, ReadFault::kAbsent);
    return true;
  }
  TierReads& ts = reads_[t];
  const uint32_t index = ts.free.back();
  ts.free.pop_back();
  ReadSlot& slot = ts.slots[index];
  const uint64_t start = uint64_t{blk.segment} * meta.segment_size;
  const DeviceProperties& props = tier.device->properties();
  const ChunkRead& read = c.request;
  slot.ref = ref;
  slot.payload = static_cast<uint32_t>(meta.segment_length(blk.segment));
  slot.dst = static_cast<uint8_t*>(read.dst) + start;
  const uint32_t length = static_cast<uint32_t>(AlignUp(slot.payload, props.offset_alignment));
  // Through a bounce buffer also on the thread engine, and into registered memory whose pages
  // are not pinned yet: pages a thread is reading into, or not pinned, cannot be taken back, so
  // only a bounced read can be abandoned and hedged there.
  const bool via_bounce = read.bounce || c.bounce || props.threads_engine ||
                          reinterpret_cast<uintptr_t>(slot.dst) % props.mem_alignment != 0 ||
                          start + length > read.dst_capacity || regions_->Pending(slot.dst, length);
  slot.oversized.reset();
  uint8_t* target = slot.dst;
  if (via_bounce) {
    ++tier.counters.bounce_reads;
    target = slot.bounce;
    if (length > config_.block_size) {
      slot.oversized = AllocateAligned(length);
      target = slot.oversized.get();
    }
  }
  const int64_t now = reactor_->NowNs();
  step->use[t].ReadStarted(now);
  ++step->reads_in_flight;
  slot.Set(IoKind::kRead, *file, meta.header_size() + start, length, target);
  slot.state = ReadState::kOnTime;
  slot.held = false;
  slot.issued_ns = now;
  tier.device->Queue(&slot);
  return true;
}

void StepReader::Complete(int t, const IoCompletion& c) {
  Tier& tier = *tiers_[t];
  auto& slot = static_cast<ReadSlot&>(*c.request);
  const uint32_t index = static_cast<uint32_t>(&slot - reads_[t].slots.data());
  const int64_t now = reactor_->NowNs();
  ReadLanded(t, &slot, now);
  if (c.status == IoStatus::kOk) TuneDepth(t, slot.length, now);
  const BlockRef ref = slot.ref;
  auto* step = static_cast<ReadStep*>(ref.step);
  const StepBlock& blk = step->blocks[ref.block];
  step->use[t].ReadEnded(now);
  --step->reads_in_flight;
  const bool bounced = slot.buffer != slot.dst;
  const bool held = slot.held;
  slot.held = false;
  if (blk.state == BlockState::kAbandoned || c.status != IoStatus::kOk || !config_.verify_checksums || !bounced) {
    FreeSlot(t, index);  // a bounced block keeps its slot (the bytes) until verified and copied
  }
  if (blk.state == BlockState::kAbandoned) {  // hedged, or its chunk is being read again
    if (held) HeldReadLanded(step, blk.chunk);
    return;
  }
  const ChunkRead& read = step->reads[blk.chunk].request;
  if (c.status != IoStatus::kOk) {
    if (read.dst_fd >= 0 && !bounced && c.error == EFAULT) {  // the client unmapped its memory, not the tier's fault
      regions_->Refresh(slot.dst, slot.length);  // registers what the file maps now, if it grew back
      DestinationGone(step, blk.chunk, absl::FailedPreconditionError(absl::StrCat(
                                           "the destination of '", read.key, "' is no longer in the client's memory ",
                                           "(truncated while being read into)")));
      return;
    }
    ReadFailed(t, step, ref, absl::StrCat("read error on tier ", tier.name, ": ", std::strerror(c.error)), c.status,
               c.error == ENOENT || c.error == ESTALE ? ReadFault::kAbsent : ReadFault::kError);
    return;
  }
  if (!config_.verify_checksums) {
    if (bounced && !CopyIn(step, blk.chunk, slot)) return;
    Accept(t, ref, slot.payload);
    return;
  }
  ++step->verifying;
  const ChunkMeta& meta = *step->reads[blk.chunk].meta;
  VerifyJob job{static_cast<const uint8_t*>(slot.buffer)};
  job.guarded = read.dst_fd >= 0 && !bounced;  // client memory that may vanish under the hash
  job.length = slot.payload;
  job.expected = meta.segment_checksums[blk.segment];
  if (tier.payload_key != nullptr) {  // a shared tier: the tag, which only a key holder can make match
    job.key = tier.payload_key.get();
    job.meta = &meta;
    job.segment = blk.segment;
  }
  job.owner = step;
  job.index = ref.block;
  job.slot = bounced ? index : kNoSlot;
  job.tier = t;
  verifier_->Submit(job);
  if (verifier_->threads() == 0) TakeVerified();  // verified inline: settle now
}

bool StepReader::TakeVerified() {
  verified_.clear();
  verifier_->TakeDone(&verified_);
  for (const VerifyJob& job : verified_) Verified(job);
  return !verified_.empty();
}

void StepReader::Verified(const VerifyJob& job) {
  if (job.backlogged_ns > 0) {
    verify_bytes_ += job.length;
    verify_seconds_ += job.backlogged_ns / 1e9;
  }
  auto* step = static_cast<ReadStep*>(job.owner);
  const BlockRef ref{step, job.index};
  const StepBlock blk = step->blocks[ref.block];
  --step->verifying;
  const bool wanted = blk.state != BlockState::kAbandoned;  // the chunk may have been placed again
  if (job.slot != kNoSlot) {
    ReadSlot& slot = reads_[job.tier].slots[job.slot];
    // Copied here, on the loop, only while wanted: a late copy could land over a newer version.
    const bool copied = !wanted || !job.ok || CopyIn(step, blk.chunk, slot);
    FreeSlot(job.tier, job.slot);
    if (!copied) return;  // the destination is gone; the chunk failed
  }
  if (!wanted) {
    if (step->unfinished == 0) Finish(step);  // it waited for this job
    return;
  }
  if (job.guarded && !job.ok) {
    // The pages a fixed-buffer read pinned may no longer be the file's (truncated, perhaps grown
    // back): later reads, this block's failover too, go to the pages the file has now.
    regions_->Refresh(const_cast<uint8_t*>(job.data), job.length);
  }
  if (job.gone) {
    DestinationGone(step, blk.chunk, absl::FailedPreconditionError(absl::StrCat(
                                         "the destination of '", step->reads[blk.chunk].request.key,
                                         "' is no longer in the client's memory (truncated while being read into)")));
    return;
  }
  // Hashed in its destination, which its owner can write into (an arena, a client region) while
  // the read lands: no verdict on the tier, which is judged only on bytes in the store's memory.
  if (!job.ok && job.slot == kNoSlot) {
    ReadAgainBounced(job.tier, step, ref);
    return;
  }
  if (!job.ok) {
    ReadFailed(job.tier, step, ref,
               absl::StrCat(job.key != nullptr ? "segment tag mismatch (not the bytes a key holder wrote)" : "checksum mismatch",
                            " on tier ", tiers_[job.tier]->name, " (block ", blk.segment, ")"),
               IoStatus::kMediaError, ReadFault::kMismatch);
    return;
  }
  Accept(job.tier, ref, job.length);
}

void StepReader::Accept(int t, BlockRef ref, uint32_t payload) {
  auto* step = static_cast<ReadStep*>(ref.step);
  const uint32_t chunk = step->blocks[ref.block].chunk;
  Tier& tier = *tiers_[t];
  pool_->Done(ref);
  ++tier.counters.blocks_read;
  tier.counters.bytes_read += payload;
  ++step->use[t].blocks;
  step->use[t].bytes += payload;
  step->reads[chunk].result.tier_mask |= 1u << t;
  Settle(step, chunk);
}

void StepReader::ReadFailed(int t, ReadStep* step, BlockRef ref, std::string why, IoStatus kind, ReadFault fault) {
  const uint32_t chunk = step->blocks[ref.block].chunk;
  if (PlaceAgainIfRewritten(step, chunk)) return;  // not the tier's fault
  Tier& tier = *tiers_[t];
  ReadChunk& c = step->reads[chunk];
  const bool mismatch = fault == ReadFault::kMismatch;
  // Another node's file that is gone, replaced or bad: a miss here, nothing of this node's lost.
  const bool foreign = (c.foreign & (1u << t)) != 0;
  const bool foreign_missing = foreign && fault != ReadFault::kError;
  (foreign_missing ? c.foreign_missing : c.real_failure) = true;
  if (!foreign_missing || mismatch) ++(mismatch ? tier.counters.checksum_failures : tier.counters.read_errors);
  tier.counters.CountError(kind);
  const bool bad_copy = mismatch || IsBadCopy(kind);
  if (foreign && mismatch && on_foreign_bad_) on_foreign_bad_(t, *c.meta);
  uint64_t left_out;
  if (foreign_missing && !mismatch) {
    spdlog::debug("tier {}: '{}': another node's file: {}", tier.name, c.request.key, why);
  } else if (tier.read_log.Allow(&left_out)) {
    spdlog::warn("tier {}: '{}': {}{}", tier.name, c.request.key, why,
                 left_out ? absl::StrCat(" (", left_out, " more read failures not logged)") : "");
  }
  c.error = std::move(why);
  pool_->Fail(ref, t);  // only this chunk loses the tier; its other chunks are unaffected
  if (bad_copy) DropReplica(step, chunk, t);
  Settle(step, chunk);
}

// Drops the bad copy, unless the key was rewritten since this step placed it (then the file on
// this tier may be the new version, and this step's read simply fails over).
void StepReader::DropReplica(ReadStep* step, uint32_t chunk, int t) {
  std::vector<Victim> victims;
  {
    absl::MutexLock lock(&index_->mu());
    Index& index = index_->get();
    const ReadChunk& c = step->reads[chunk];
    const IndexEntry* e = index.Find(c.request.key);
    Victim v;
    if (e != nullptr && e->meta == c.meta && index.RemoveReplica(c.request.key, t, &v)) {
      victims.push_back(std::move(v));
      ++tiers_[t]->counters.dropped_replicas;
    }
  }
  RemoveReplicaFiles(tiers_, victims);
}

void StepReader::Settle(ReadStep* step, uint32_t chunk) {
  const ReadChunk& c = step->reads[chunk];
  if (c.held > 0) return;  // reads abandoned straight into its destination still land
  switch (StepPool::ChunkOutcome(*step, chunk)) {
    case StepPool::Outcome::kPending:
      return;
    case StepPool::Outcome::kComplete:
      Deliver(step, chunk, absl::OkStatus());
      break;
    case StepPool::Outcome::kFailed:
      if (c.foreign_missing && !c.real_failure) {
        Deliver(step, chunk, absl::NotFoundError(absl::StrCat("'", c.request.key, "' is no longer in the file another ",
                                                              "node published (", c.error, ")")));
        break;
      }
      Deliver(step, chunk,
              absl::DataLossError(absl::StrCat("no intact replica of '", c.request.key, "' (", c.error, ")")));
      break;
  }
  if (step->unfinished == 0) Finish(step);
}

void StepReader::Deliver(ReadStep* step, uint32_t chunk, absl::Status status) {
  ReadChunk& c = step->reads[chunk];
  ChunkResult& result = c.result;
  result.status = std::move(status);
  if (!result.status.ok()) result.size = 0;
  pool_->Finish(step, chunk);
  bool copy = false;
  if (c.meta) {
    absl::MutexLock lock(&index_->mu());
    const IndexEntry* e = index_->get().Find(c.request.key);
    if (result.status.ok() && on_foreign_read_ && e != nullptr && e->meta == c.meta && e->foreign != 0 &&
        e->own() == 0) {
      // Cross-node reuse: the chunk is only in other nodes' files; copy it where the replication
      // policy would have put this node's own write of it.
      copy = GroupMissing(tiers_, e->tiers, step->policies.replication == ReplicationPolicy::kPrimary);
    }
    index_->get().Unpin(c.request.key);
  }
  if (copy) on_foreign_read_(c.request, *c.meta);
  if (result.status.ok()) {
    ++counters_->retrieve_hits;
  } else if (absl::IsNotFound(result.status)) {
    ++counters_->retrieve_misses;
  } else {
    ++counters_->retrieve_failures;
  }
  if (step->on_chunk) step->on_chunk(result);
}

void StepReader::Finish(ReadStep* step) {
  // A step ends once no verify thread reads its memory (an abandoned block's job may be left).
  if (step->end_ns != 0 || step->verifying > 0 || step->held_total > 0) return;
  step->end_ns = std::max(reactor_->NowNs(), step->start_ns + 1);
  pool_->Remove(step);
  for (TierUse& use : step->use) use.StepEnded(step->end_ns);
  std::vector<ChunkResult> results;
  results.reserve(step->reads.size());
  for (const ReadChunk& c : step->reads) results.push_back(c.result);
  StepRecord rec = MakeStepRecord({&results, &step->use, &tier_names_, step->eligible,
                                   step->end_ns - step->start_ns, step->policies, step->estimate_seconds},
                                  &reference_);
  for (size_t t = 0; t < tiers_.size(); ++t) tiers_[t]->reference_bps = reference_[t].bps();
  if (verify_bytes_ > 0) {  // a backlog: the threads ran at once, each at the rate of its jobs
    verify_reference_.Add(verify_bytes_, verify_seconds_ / verifier_->threads());
  } else {
    verify_reference_ = {};  // none: the verification kept up, it does not bound the steps
  }
  verify_bps_.store(verify_reference_.bps(), std::memory_order_relaxed);
  verify_bytes_ = verify_seconds_ = 0;
  rec.start_unix_ns = UnixNowNs() - (step->end_ns - step->start_ns);
  on_step_finished_(&rec);
  if (step->on_done) step->on_done(std::move(rec));
}

void StepReader::Sweep() {
  std::erase_if(steps_, [](const std::unique_ptr<ReadStep>& s) {
    return s->end_ns != 0 && s->reads_in_flight == 0 && s->verifying == 0;
  });
}

}  // namespace kvstream
