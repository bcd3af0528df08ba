#include "engine.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "absl/strings/str_cat.h"
#include "catalog/reconcile.h"
#include "catalog/recovery.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"
#include "util/unix_time.h"

namespace kvstream {
namespace {

constexpr int64_t kIdleWaitNs = 100'000'000;
constexpr int64_t kTierCheckNs = 1'000'000'000;

}  // namespace

int64_t Engine::SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Engine::Engine(StoreConfig config, Tiers tiers, std::shared_ptr<Reactor> reactor)
    : config_(std::move(config)),
      reactor_(std::move(reactor)),
      tiers_(std::move(tiers)),
      index_([this] {
        std::vector<uint64_t> capacities;
        for (const TierConfig& t : config_.tiers) capacities.push_back(t.capacity_bytes);
        return capacities;
      }(), config_.foreign_chunks_limit, {config_.tenant_tier_share, config_.tenant_locked_bytes}),
      stager_(config_.staging_limit_bytes, config_.staging_high_water, config_.block_size,
              static_cast<int64_t>(config_.staging_max_defer_seconds * 1e9), reactor_.get()),
      regions_(tiers_),
      pool_(static_cast<int>(tiers_.size()), config_.routing, config_.batching),
      reader_(config_, tiers_, &index_, &stager_, &pool_, &regions_, reactor_.get(), &counters_,
              [this](StepRecord* record) { StepFinished(record); }),
      replicator_(config_, tiers_, &index_, &stager_, reactor_.get(), &counters_),
      shared_lookup_(config_, tiers_, &index_, reactor_.get()),
      policies_(PoliciesOf(config_)),
      faulter_([this](const uint8_t* base, uint64_t generation, size_t piece) {
        Post([this, base, generation, piece] { regions_.RegisterPiece(base, generation, piece); });
      }) {
  reader_.set_on_foreign_read(
      [this](const ChunkRead& read, const ChunkMeta& meta) { StageForeignRead(read, meta); });
  reader_.set_on_foreign_bad([this](int tier, const ChunkMeta& meta) { shared_lookup_.MarkBad(tier, meta); });
}

void Engine::StageForeignRead(const ChunkRead& read, const ChunkMeta& meta) {
  // One copy per key at a time (steps reading one prefix at once), and only while staging has
  // room to spare: these copies are opportunistic, never a reason for writes during reads or for
  // a producer to wait. Never waits itself (the loop must not).
  if (foreign_copies_.contains(read.key)) return;
  if (stager_.filling()) {
    ++counters_.shared_copies_skipped;
    return;
  }
  const PersistCallback done = [this](const std::string& key, const PersistResult&) { foreign_copies_.erase(key); };
  // Its bytes were verified against `meta`'s checksums as they landed: the copy keeps those
  // (with verification off nothing was checked, so the copy is hashed).
  const size_t size = meta.payload_size;
  const ChunkMeta* verified = config_.verify_checksums ? &meta : nullptr;
  const absl::Status s =
      read.dst_fd >= 0 ? stager_.StageFromFile(read.key, {read.dst_fd, read.dst_fd_offset, size}, done, false, verified)
                       : stager_.Stage(read.key, read.dst, size, done, false, verified);
  if (s.ok()) foreign_copies_.insert(read.key);
  ++(s.ok() ? counters_.shared_copies : counters_.shared_copies_skipped);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(StoreConfig config,
                                                       std::vector<std::unique_ptr<TierDevice>> devices,
                                                       std::shared_ptr<Reactor> reactor,
                                                       std::shared_ptr<const ChunkMacKey> mac_key) {
  if (devices.size() != config.tiers.size() || devices.empty() || devices.size() > kMaxTiers) {
    return absl::InvalidArgumentError("one device per configured tier is required");
  }
  Tiers tiers;
  for (size_t t = 0; t < devices.size(); ++t) {
    auto tier = std::make_unique<Tier>();
    tier->name = config.tiers[t].name;
    tier->group_name = config.tiers[t].group.empty() ? tier->name : config.tiers[t].group;
    if (t > 0) tier->group = tiers[t - 1]->group + (tier->group_name != tiers[t - 1]->group_name);
    tier->device = std::move(devices[t]);
    tier->read_depth = std::max(config.tiers[t].queue_depth, config.tiers[t].queue_depth_max);
    tier->read_depth_now = config.tiers[t].queue_depth;
    tier->write_depth = config.tiers[t].write_queue_depth;
    if (config.tiers[t].shared) tier->payload_key = mac_key;
    tiers.push_back(std::move(tier));
  }
  for (size_t t = 0; t < tiers.size(); ++t) {
    for (size_t k = 0; k < tiers.size(); ++k) tiers[t]->group_mask |= uint32_t{tiers[k]->group == tiers[t]->group} << k;
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(config), std::move(tiers), std::move(reactor)));
  engine->stager_.set_mac_key(std::move(mac_key));
  if (absl::Status s = engine->reader_.Init(); !s.ok()) return s;
  std::vector<bool> from_checkpoint;
  {
    absl::MutexLock lock(&engine->index_.mu());
    if (absl::Status s = RecoverIndex(engine->tiers_, &engine->index_.get(), &from_checkpoint); !s.ok()) return s;
  }
  engine->thread_ = std::thread([e = engine.get()] {
    NameThisThread("kvs-loop");
    e->Loop();
  });
  if (std::find(from_checkpoint.begin(), from_checkpoint.end(), true) != from_checkpoint.end()) {
    engine->reconciling_.store(true);
    engine->reconcile_thread_ = std::thread([e = engine.get(), from_checkpoint] {
      NameThisThread("kvs-reconcile");
      e->Reconcile(from_checkpoint);
    });
  }
  return engine;
}

void Engine::Reconcile(const std::vector<bool>& tiers) {
  const int64_t started = UnixNowNs();
  for (size_t t = 0; t < tiers.size() && !reconcile_stop_; ++t) {
    if (!tiers[t]) continue;
    const ReconcileReport r = ReconcileTier(tiers_, static_cast<int>(t), &index_, started, reconcile_stop_);
    if (r.missing + r.torn + r.unconfirmed + r.added + r.removed > 0) {
      spdlog::warn("tier {}: reconciled the saved index with the files: {} in place, {} gone (out of the index), "
                   "{} torn (removed), {} that could not be looked at (out of the index, kept), "
                   "{} unindexed files indexed, {} removed",
                   tiers_[t]->name, r.checked, r.missing, r.torn, r.unconfirmed, r.added, r.removed);
    } else {
      spdlog::info("tier {}: the saved index matches the files ({} chunks)", tiers_[t]->name, r.checked);
    }
  }
  reconciling_.store(false);
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    absl::MutexLock lock(&inbox_mu_);
    stopping_ = true;
  }
  reconcile_stop_ = true;
  faulter_.Stop();
  stager_.Stop();  // blocked producers give up; what is staged is written, also during reads
  reactor_->Wake();
  absl::MutexLock join(&join_mu_);
  if (!thread_.joinable()) return;
  thread_.join();
  if (reconcile_thread_.joinable()) reconcile_thread_.join();  // before the index is saved
  absl::ReaderMutexLock lock(&index_.mu());
  SaveIndexes(tiers_, index_.get_shared());  // the next start reads these instead of every header
}

// ---------------------------------------------------------------------------------------------
// Client calls.

void Engine::RetrieveAsync(std::vector<ChunkRead> reads, ChunkCallback on_chunk,
                           std::function<void(StepRecord)> on_done) {
  if (shared_lookup_.active()) {
    std::vector<std::string> keys;
    keys.reserve(reads.size());
    for (const ChunkRead& r : reads) keys.push_back(r.key);
    shared_lookup_.Discover(keys);
  }
  const double estimate = StepEstimate(reads);
  auto step = std::make_unique<ReadStep>(std::move(reads));
  step->estimate_seconds = estimate;
  step->on_chunk = std::move(on_chunk);
  step->on_done = std::move(on_done);
  {
    absl::MutexLock lock(&inbox_mu_);
    if (!loop_exited_) {
      inbox_steps_.push_back(std::move(step));
      reactor_->Wake();
      return;
    }
  }
  // Shut down: nothing will read; every chunk is unavailable.
  StepRecord rec;
  rec.chunks = static_cast<uint32_t>(step->reads.size());
  rec.failed = rec.chunks;
  for (size_t i = 0; i < step->reads.size(); ++i) {
    if (step->on_chunk) step->on_chunk({i, absl::UnavailableError("store is shut down"), 0, 0});
  }
  if (step->on_done) step->on_done(std::move(rec));
}

absl::Status Engine::Persist(std::string_view key, const void* data, size_t size, PersistCallback on_written) {
  return stager_.Stage(key, data, size, std::move(on_written), /*block=*/true);
}

absl::Status Engine::TryPersist(std::string_view key, const void* data, size_t size, PersistCallback on_written) {
  return CountDropped(stager_.Stage(key, data, size, std::move(on_written), /*block=*/false), size);
}

absl::Status Engine::PersistFromFile(std::string_view key, const FileRange& source, PersistCallback on_written,
                                     bool wait) {
  absl::Status s = stager_.StageFromFile(key, source, std::move(on_written), /*block=*/wait);
  return wait ? s : CountDropped(std::move(s), source.size);
}

absl::Status Engine::CountDropped(absl::Status staged, uint64_t bytes) {
  if (config_.staging_drop_when_full && absl::IsResourceExhausted(staged)) {
    ++counters_.persists_dropped;
    counters_.persist_dropped_bytes += bytes;
    return absl::ResourceExhaustedError(
        "staging is full: dropped (staging.when_full: drop; the tiers cannot absorb writes this fast)");
  }
  return staged;
}

void Engine::Flush() { stager_.Flush(); }

// Lookups see the index and the write stager under the index's lock: a replica is indexed
// (under that lock, exclusively) before its chunk leaves staging, so a chunk on its way from one
// to the other is always found in one of them.
LookupEntry Engine::Present(std::string_view key) const {
  const IndexEntry* e = index_.get_shared().FindLive(key);
  std::shared_ptr<const ChunkMeta> staged = stager_.StagedVersion(key);
  if (staged != nullptr && (e == nullptr || staged->created_unix_ns >= e->meta->created_unix_ns)) {
    return {true, staged->payload_size, e != nullptr && e->meta == staged ? e->tiers : 0u};
  }
  if (e == nullptr) return {};
  return {true, e->meta->payload_size, e->tiers};
}

std::vector<LookupEntry> Engine::Lookup(const std::vector<std::string>& keys) const {
  shared_lookup_.Discover(keys);
  std::vector<LookupEntry> out(keys.size());
  absl::ReaderMutexLock lock(&index_.mu());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = Present(keys[i]);
  return out;
}

std::vector<LookupEntry> Engine::LookupAndLock(const std::vector<std::string>& keys, double lease_seconds) {
  shared_lookup_.Discover(keys);
  std::vector<LookupEntry> out(keys.size());
  const int64_t now = reactor_->NowNs();
  const int64_t until = now + static_cast<int64_t>(std::max(lease_seconds, 0.0) * 1e9);
  absl::MutexLock lock(&index_.mu());
  Index& index = index_.get();
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i] = Present(keys[i]);
    if (!out[i].present) continue;
    // On its index entry (false past the tenant's locked bytes). A key only staged is locked
    // there until its replica is indexed, except under a limit on locked bytes, which staging
    // cannot count: there it is not locked (it cannot be evicted while staged anyway).
    if (IndexEntry* e = index.Find(keys[i]); e != nullptr && e->tiers != 0) {
      out[i].locked = index.Lock(e, until, now);
    } else if (!index.locks_limited()) {
      out[i].locked = stager_.LockStaged(keys[i], until);
    }
  }
  return out;
}

size_t Engine::Unlock(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&index_.mu());
  size_t n = 0;
  for (const std::string& key : keys) n += index_.get().Unlock(key) || stager_.UnlockStaged(key);
  return n;
}

size_t Engine::PrefixHits(const std::vector<std::string>& keys) const {
  shared_lookup_.Discover(keys, /*prefix_only=*/true);
  absl::ReaderMutexLock lock(&index_.mu());
  size_t n = 0;
  while (n < keys.size() && Present(keys[n]).present) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Administration.

void Engine::RunOnLoop(const std::function<void()>& fn) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  bool exited;
  {
    absl::MutexLock lock(&inbox_mu_);
    exited = loop_exited_;
    if (!exited) {
      inbox_commands_.push_back([&] {
        fn();
        done.set_value();
      });
    }
  }
  if (exited) {
    absl::MutexLock serial(&join_mu_);  // no loop left: serialise callers instead
    fn();
    return;
  }
  reactor_->Wake();
  finished.wait();
}

void Engine::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&inbox_mu_);
    if (loop_exited_) return;
    inbox_commands_.push_back(std::move(fn));
  }
  reactor_->Wake();
}

absl::StatusOr<EvictResult> Engine::Evict(const EvictRequest& request) {
  uint32_t only = 0;  // bit k: evict on tier k (0: on every tier)
  if (!request.tier.empty()) {
    for (size_t t = 0; t < tiers_.size(); ++t) {  // a drive, or every drive of a tier
      if (tiers_[t]->name == request.tier || tiers_[t]->group_name == request.tier) only |= 1u << t;
    }
    if (only == 0) return absl::NotFoundError(absl::StrCat("no tier named '", request.tier, "'"));
  }
  if (request.key.empty() && request.bytes == 0 && !request.all) {
    return absl::InvalidArgumentError("evict needs a key, a byte count or 'all'");
  }
  if (!request.key.empty()) {
    if (absl::Status s = ValidateKey(request.key); !s.ok()) return s;
  }
  EvictResult result;
  RunOnLoop([&] {
    std::vector<Victim> victims;
    {
      absl::MutexLock lock(&index_.mu());
      Index& index = index_.get();
      for (int t = 0; t < static_cast<int>(tiers_.size()); ++t) {
        if (only != 0 && (only & (1u << t)) == 0) continue;
        const size_t before = victims.size();
        if (!request.key.empty()) {
          Victim v;
          if (index.RemoveReplica(request.key, t, &v)) victims.push_back(std::move(v));
        } else {
          index.EvictLru(t, request.all ? UINT64_MAX : request.bytes, &victims);
        }
        tiers_[t]->counters.evictions += victims.size() - before;
      }
    }
    for (const Victim& v : victims) result.bytes += v.bytes;
    result.replicas = victims.size();
    RemoveReplicaFiles(tiers_, victims);
  });
  return result;
}

absl::Status Engine::RegisterMemory(void* base, size_t size, int fd, uint64_t fd_offset) {
  absl::StatusOr<uint64_t> generation;
  bool pending = false;  // pieces to register once faulted in (none where no tier registers buffers)
  RunOnLoop([&] {
    generation = regions_.Add(static_cast<uint8_t*>(base), size, fd, fd_offset);
    pending = generation.ok() && !regions_.Registered(base);
  });
  if (!generation.ok()) return generation.status();
  if (pending) faulter_.Add(static_cast<uint8_t*>(base), size, MemoryRegions::kPieceBytes, *generation);
  return absl::OkStatus();
}

bool Engine::MemoryRegistered(const void* base) {
  bool registered = false;
  RunOnLoop([&] { registered = regions_.Registered(base); });
  return registered;
}

void Engine::UnregisterMemory(void* base) {
  faulter_.Forget(static_cast<const uint8_t*>(base));  // before the caller may free it
  RunOnLoop([&] { regions_.Remove(base); });
}

bool Engine::SetPolicies(const Policies& policies) {
  bool applied = false;
  RunOnLoop([&] {
    requested_policies_ = policies;
    MaybeApplyPolicies();
    applied = !requested_policies_.has_value();
  });
  return applied;
}

void Engine::MaybeApplyPolicies() {
  if (!requested_policies_ || !pool_.empty()) return;
  pool_.SetPolicies(requested_policies_->routing, requested_policies_->batching);
  replicator_.set_replication(requested_policies_->replication);
  absl::MutexLock lock(&policies_mu_);
  policies_ = *requested_policies_;
  requested_policies_.reset();
}

Policies Engine::policies() const {
  absl::MutexLock lock(&policies_mu_);
  return policies_;
}

std::vector<StepRecord> Engine::RecentSteps(size_t max) const { return history_.Recent(max); }

// ---------------------------------------------------------------------------------------------
// The loop.

void Engine::Loop() {
  std::vector<IoCompletion> completions;
  while (true) {
    loop_ran_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
    bool progress = TakeInbox();
    for (size_t t = 0; t < tiers_.size(); ++t) {
      completions.clear();
      tiers_[t]->device->Reap(&completions);
      progress |= !completions.empty();
      for (const IoCompletion& c : completions) {
        if (c.request->kind == IoKind::kRead) {
          reader_.Complete(static_cast<int>(t), c);
        } else {
          replicator_.Complete(static_cast<int>(t), c);
        }
      }
    }
    progress |= reader_.TakeVerified();
    if (const int64_t now = reactor_->NowNs(); now >= next_tier_check_ns_) {
      CheckTiers();
      next_tier_check_ns_ = now + kTierCheckNs;
    }
    int64_t next_deadline = reader_.CheckDeadlines();
    reader_.Sweep();
    for (size_t t = 0; t < tiers_.size(); ++t) {
      next_deadline = std::min(next_deadline, reader_.Schedule(static_cast<int>(t)));
    }
    if (!replicator_.idle()) {
      const bool reads_pending = reader_.reads_pending();
      if (stager_.MayWrite(policies().writes, reads_pending, reactor_->NowNs())) {
        for (size_t t = 0; t < tiers_.size(); ++t) replicator_.Schedule(static_cast<int>(t), reads_pending);
      } else {
        next_deadline = std::min(next_deadline, stager_.WritesDueNs());  // deferred no longer than that
      }
    }
    for (auto& tier : tiers_) tier->device->Submit();
    PublishLoad();
    {
      absl::MutexLock lock(&inbox_mu_);
      const bool idle = inbox_steps_.empty() && inbox_commands_.empty() && Idle();
      if (stopping_ && idle) {
        loop_exited_ = true;
        break;
      }
    }
    if (progress) continue;
    if (next_deadline != StepReader::kNoDeadline) {
      reactor_->WaitUntil(std::min(next_deadline, reactor_->NowNs() + kIdleWaitNs));
    } else {
      reactor_->Wait(kIdleWaitNs);
    }
  }
}

void Engine::CheckTiers() {
  using State = TierCondition::State;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    Tier& tier = *tiers_[t];
    TierCondition condition = tier.device->Condition();
    // Detached: tried every time round, as nothing else would bring the tier back (a remount).
    if (condition.state == State::kDetached && tier.device->Reopen().ok()) {
      spdlog::warn("tier {}: its directory is reachable again: reopened", tier.name);
      condition = tier.device->Condition();
    }
    {
      absl::MutexLock lock(&tier.condition_mu);
      if (condition.reason == tier.condition) continue;  // nothing new
    }
    const bool was_not_answering = tier.not_answering;
    tier.not_answering = condition.state == State::kNotAnswering;
    if (condition.state == State::kUsable) {
      if (was_not_answering) {
        spdlog::warn("tier {}: its file system answers again: usable again", tier.name);
      } else {
        spdlog::warn("tier {}: usable again (its chunks return to the index at the next start)", tier.name);
      }
    } else if (condition.state == State::kNotAnswering) {
      // Its chunks stay indexed: the tier is stalled, read and written again once it answers.
      spdlog::error("tier {}: {}: stalled, neither read nor written until it answers", tier.name, condition.reason);
    } else if (!condition.readable()) {
      uint64_t dropped;
      {
        absl::MutexLock lock(&index_.mu());
        dropped = index_.get().DropTier(static_cast<int>(t));
      }
      spdlog::error("tier {}: {}: its {} chunks are out of the index", tier.name, condition.reason, dropped);
      if (condition.state == State::kDeleted && tier.device->Recreate().ok()) {
        spdlog::warn("tier {}: its directory is made again, empty, and in use", tier.name);
        condition = {};
      }
    } else {
      spdlog::error("tier {}: {}: no more replicas are written there", tier.name, condition.reason);
    }
    tier.readable = condition.readable();
    tier.writable = condition.writable();
    absl::MutexLock lock(&tier.condition_mu);
    tier.condition = std::move(condition.reason);
  }
}

bool Engine::Idle() const { return reader_.idle() && replicator_.idle() && stager_.empty(); }

bool Engine::TakeInbox() {
  std::vector<std::unique_ptr<ReadStep>> steps;
  std::vector<std::function<void()>> commands;
  std::vector<std::unique_ptr<StagedChunk>> staged;
  {
    absl::MutexLock lock(&inbox_mu_);
    steps.swap(inbox_steps_);
    commands.swap(inbox_commands_);
  }
  stager_.TakeStaged(&staged);
  const Policies placed_under = policies();
  for (auto& step : steps) reader_.Place(std::move(step), placed_under);
  for (auto& fn : commands) fn();
  for (auto& chunk : staged) replicator_.Add(std::move(chunk));
  return !steps.empty() || !commands.empty() || !staged.empty();
}

void Engine::StepFinished(StepRecord* record) {
  history_.Add(record);
  step_seconds_.Observe(record->wall_seconds);
  if (record->bound_seconds > 0) {
    step_bound_seconds_.Observe(record->bound_seconds);
    step_gap_.Observe(record->gap);
  }
  ObserveEstimate(*record);
  MaybeApplyPolicies();  // after the record names the policies that ran this step
}

}  // namespace kvstream
