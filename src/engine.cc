#include "engine.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

constexpr uint64_t kWriteTagBit = 1ull << 63;
constexpr int kTierShift = 48;
constexpr int64_t kIdleWaitNs = 100'000'000;
constexpr size_t kHistoryLimit = 1024;
constexpr double kReferenceWeight = 0.25;  // of a new step's bandwidth in the moving average

uint64_t MakeTag(bool write, int tier, uint32_t slot) {
  return (write ? kWriteTagBit : 0) | (uint64_t{static_cast<uint32_t>(tier)} << kTierShift) | slot;
}

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuffer AllocateAligned(size_t bytes) {
  return AlignedBuffer(static_cast<uint8_t*>(std::aligned_alloc(kFileAlignment, AlignUp(bytes, kFileAlignment))));
}

}  // namespace

struct Engine::Tier {
  struct ReadSlot {
    BlockRef ref;
    uint8_t* dst = nullptr;      // where the payload belongs
    uint32_t length = 0;         // payload bytes of the block
    uint8_t* bounce = nullptr;   // used when dst cannot take an aligned read
    size_t bounce_capacity = 0;
    AlignedBuffer oversized;     // bounce for blocks larger than block_size (older chunks)
    uint8_t* target = nullptr;   // where this op reads to: dst, or a bounce buffer
  };
  struct WriteSlot {
    WriteJob* job = nullptr;
    bool sync = false;
  };

  std::string name;
  AlignedBuffer bounce_pool;  // read_depth x block_size; destroyed after the device
  std::unique_ptr<TierDevice> device;
  uint32_t read_depth = 0;
  uint32_t write_depth = 0;
  std::vector<ReadSlot> read_slots;
  std::vector<uint32_t> free_reads;
  std::vector<WriteSlot> write_slots;
  std::vector<uint32_t> free_writes;
  std::atomic<double> reference_bps{0};

  // Counters, written by the loop, read by Stats.
  std::atomic<uint64_t> bytes_read{0}, blocks_read{0}, bytes_written{0}, replicas_written{0};
  std::atomic<uint64_t> read_errors{0}, checksum_failures{0}, write_errors{0}, evictions{0};
  std::atomic<uint64_t> bounce_reads{0};
};

// One retrieval: the pool's view (PoolBatch) plus what the engine needs to deliver results.
struct Engine::Step : PoolBatch {
  std::vector<ChunkRead> reads;
  std::vector<ChunkResult> results;
  std::vector<std::shared_ptr<const ChunkMeta>> metas;  // null for chunks finished at placement
  std::vector<std::string> stems;
  std::vector<std::string> errors;  // last block error per chunk, for the failure message
  ChunkCallback on_chunk;
  std::function<void(StepRecord)> on_done;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t eligible = 0;  // tiers holding at least one chunk of the step
  struct PerTier {
    uint64_t blocks = 0, bytes = 0;
    uint32_t in_flight = 0;
    int64_t busy_since = 0, busy_ns = 0;
  };
  std::vector<PerTier> per_tier;
};

struct Engine::WriteJob {
  enum class State { kPending, kWriting, kSyncing, kDone, kFailed };
  struct Replica {
    State state = State::kDone;  // tiers not targeted count as done-and-absent
    bool target = false;
    FileHandle temp = -1;
    uint64_t next_offset = 0;
    uint32_t in_flight = 0;
    absl::Status error;
  };
  uint64_t seq = 0;
  std::shared_ptr<const ChunkMeta> meta;
  std::string stem;
  AlignedBuffer image;
  uint64_t image_size = 0;
  PersistCallback callback;
  std::vector<Replica> replicas;
  bool started = false;
  uint32_t durable = 0;  // tiers whose replica is durable
};

Engine::Engine(StoreConfig config, std::shared_ptr<Reactor> reactor)
    : config_(std::move(config)),
      reactor_(std::move(reactor)),
      router_(static_cast<int>(config_.tiers.size()), config_.routing, config_.batching),
      public_policies_(PoliciesOf(config_)),
      policies_(PoliciesOf(config_)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(StoreConfig config,
                                                       std::vector<std::unique_ptr<TierDevice>> devices,
                                                       std::shared_ptr<Reactor> reactor) {
  if (devices.size() != config.tiers.size() || devices.empty() || devices.size() > kMaxTiers) {
    return absl::InvalidArgumentError("one device per configured tier is required");
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(config), std::move(reactor)));
  std::vector<uint64_t> capacities;
  for (size_t t = 0; t < devices.size(); ++t) {
    const TierConfig& tc = engine->config_.tiers[t];
    auto tier = std::make_unique<Tier>();
    tier->name = tc.name;
    tier->device = std::move(devices[t]);
    tier->read_depth = tc.queue_depth;
    tier->write_depth = tc.write_queue_depth;
    tier->read_slots.resize(tier->read_depth);
    for (uint32_t i = tier->read_depth; i > 0; --i) tier->free_reads.push_back(i - 1);
    // Bounce buffers, preallocated and registered for fixed-buffer reads where the device can.
    const size_t block = engine->config_.block_size;
    tier->bounce_pool = AllocateAligned(block * tier->read_depth);
    if (!tier->bounce_pool) return absl::ResourceExhaustedError("cannot allocate bounce buffers");
    for (uint32_t i = 0; i < tier->read_depth; ++i) {
      tier->read_slots[i].bounce = tier->bounce_pool.get() + i * block;
      tier->read_slots[i].bounce_capacity = block;
    }
    if (tier->device->properties().fixed_buffers) {
      auto region = tier->device->RegisterRegion(tier->bounce_pool.get(), block * tier->read_depth);
      if (!region.ok()) spdlog::info("tier {}: bounce buffers not registered: {}", tc.name,
                                     std::string(region.status().message()));
    }
    tier->write_slots.resize(tier->write_depth);
    for (uint32_t i = tier->write_depth; i > 0; --i) tier->free_writes.push_back(i - 1);
    capacities.push_back(tc.capacity_bytes);
    engine->tiers_.push_back(std::move(tier));
  }
  engine->index_ = std::make_unique<Index>(std::move(capacities));
  if (absl::Status s = engine->Rebuild(); !s.ok()) return s;
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

absl::Status Engine::Rebuild() {
  std::vector<std::pair<int, ScannedChunk>> all;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    absl::StatusOr<ScanReport> report = tiers_[t]->device->Scan();
    if (!report.ok()) return report.status();
    spdlog::info("tier {}: {} chunk files, removed {} temporaries and {} invalid files", tiers_[t]->name,
                 report->chunks.size(), report->removed_temporaries, report->removed_invalid);
    for (ScannedChunk& c : report->chunks) all.emplace_back(static_cast<int>(t), std::move(c));
  }
  // Oldest first, so the LRU order starts as creation order.
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second.meta.created_unix_ns < b.second.meta.created_unix_ns;
  });
  std::vector<Victim> stale;
  for (auto& [tier, chunk] : all) {
    const IndexEntry* e = index_->Find(chunk.meta.key);
    if (e != nullptr && (e->meta->payload_checksum != chunk.meta.payload_checksum ||
                         e->meta->payload_size != chunk.meta.payload_size) &&
        e->meta->created_unix_ns > chunk.meta.created_unix_ns) {
      stale.push_back({chunk.meta.key, FileStem(chunk.meta.key), tier, chunk.file_size});
      continue;
    }
    auto replaced = index_->AddReplica(tier, std::make_shared<const ChunkMeta>(std::move(chunk.meta)));
    stale.insert(stale.end(), replaced.begin(), replaced.end());
  }
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const size_t before = stale.size();
    index_->MakeRoom(static_cast<int>(t), 0, &stale);
    tiers_[t]->evictions += stale.size() - before;
  }
  RemoveFiles(stale);
  return absl::OkStatus();
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    draining_ = true;  // drain staged writes even while retrievals keep coming
  }
  cv_.notify_all();  // Persist calls waiting for staging space give up
  reactor_->Wake();
  std::lock_guard join(join_mu_);
  if (thread_.joinable()) thread_.join();
}

// ---------------------------------------------------------------------------------------------
// Client-facing calls.

void Engine::RetrieveAsync(std::vector<ChunkRead> batch, ChunkCallback on_chunk,
                           std::function<void(StepRecord)> on_done) {
  auto step = std::make_unique<Step>();
  step->reads = std::move(batch);
  step->on_chunk = std::move(on_chunk);
  step->on_done = std::move(on_done);
  {
    std::lock_guard lock(mu_);
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

StepRecord Engine::Retrieve(std::vector<ChunkRead> batch, std::vector<ChunkResult>* results,
                            ChunkCallback on_chunk) {
  const size_t n = batch.size();
  if (results) results->assign(n, ChunkResult{});
  std::promise<StepRecord> done;
  std::future<StepRecord> record = done.get_future();
  RetrieveAsync(
      std::move(batch),
      [results, on_chunk](const ChunkResult& r) {
        if (results) (*results)[r.index] = r;
        if (on_chunk) on_chunk(r);
      },
      [&done](StepRecord r) { done.set_value(std::move(r)); });
  return record.get();
}

absl::Status Engine::Persist(std::string_view key, const void* data, size_t size,
                             PersistCallback on_durable, bool block) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (size == 0) return absl::InvalidArgumentError("empty chunk");
  auto job = std::make_unique<WriteJob>();
  auto meta = std::make_shared<ChunkMeta>(DescribeChunk(key, data, size, config_.block_size, UnixNowNs()));
  job->image_size = meta->file_size();
  if (job->image_size > config_.staging_limit_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", size, " bytes (", job->image_size,
                                                   " on disk) exceeds the staging limit of ",
                                                   config_.staging_limit_bytes, " bytes"));
  }
  {
    std::unique_lock lock(mu_);
    while (!stopping_ && staged_bytes_ + job->image_size > config_.staging_limit_bytes) {
      if (!block) return absl::ResourceExhaustedError("staging is full");
      ++space_waiters_;
      reactor_->Wake();
      cv_.wait(lock);
      --space_waiters_;
    }
    if (stopping_) return absl::UnavailableError("store is shutting down");
    staged_bytes_ += job->image_size;
    ++staged_chunks_;
    job->seq = next_job_seq_++;
    outstanding_jobs_.insert(job->seq);
  }
  job->image = AllocateAligned(job->image_size);
  if (!job->image) {
    std::lock_guard lock(mu_);
    staged_bytes_ -= job->image_size;
    --staged_chunks_;
    outstanding_jobs_.erase(job->seq);
    cv_.notify_all();
    return absl::ResourceExhaustedError("cannot allocate staging memory");
  }
  EncodeChunkFile(*meta, data, job->image.get());
  job->stem = FileStem(key);
  job->meta = std::move(meta);
  job->callback = std::move(on_durable);
  {
    std::lock_guard lock(mu_);
    inbox_jobs_.push_back(std::move(job));
  }
  reactor_->Wake();
  return absl::OkStatus();
}

void Engine::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = next_job_seq_;
  cv_.wait(lock, [&] { return outstanding_jobs_.empty() || *outstanding_jobs_.begin() >= target; });
}

std::vector<LookupResult> Engine::Lookup(const std::vector<std::string>& keys) const {
  std::vector<LookupResult> out(keys.size());
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const IndexEntry* e = index_->FindLive(keys[i])) out[i] = {true, e->meta->payload_size, e->tiers};
  }
  return out;
}

size_t Engine::PrefixHits(const std::vector<std::string>& keys) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  while (n < keys.size() && index_->FindLive(keys[n]) != nullptr) ++n;
  return n;
}

void Engine::RunOnLoop(std::function<void()> fn) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  bool exited;
  {
    std::lock_guard lock(mu_);
    exited = loop_exited_;
    if (!exited) {
      inbox_commands_.push_back([&] {
        fn();
        done.set_value();
      });
    }
  }
  if (exited) {
    std::lock_guard serial(join_mu_);  // no loop left: serialise callers instead
    fn();
    return;
  }
  reactor_->Wake();
  finished.wait();
}

absl::StatusOr<EvictResult> Engine::Evict(const EvictRequest& request) {
  int only = -1;
  if (!request.tier.empty()) {
    for (size_t t = 0; t < tiers_.size(); ++t) {
      if (tiers_[t]->name == request.tier) only = static_cast<int>(t);
    }
    if (only < 0) return absl::NotFoundError(absl::StrCat("no tier named '", request.tier, "'"));
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
      std::lock_guard lock(mu_);
      for (int t = 0; t < static_cast<int>(tiers_.size()); ++t) {
        if (only >= 0 && t != only) continue;
        const size_t before = victims.size();
        if (!request.key.empty()) {
          Victim v;
          if (index_->RemoveReplica(request.key, t, &v)) victims.push_back(std::move(v));
        } else {
          index_->EvictLru(t, request.all ? UINT64_MAX : request.bytes, &victims);
        }
        tiers_[t]->evictions += victims.size() - before;
      }
    }
    for (const Victim& v : victims) result.bytes += v.bytes;
    result.replicas = victims.size();
    RemoveFiles(victims);
  });
  return result;
}

absl::Status Engine::RegisterMemory(void* base, size_t size) {
  if (base == nullptr || size == 0) return absl::InvalidArgumentError("empty region");
  absl::Status status;
  RunOnLoop([&] {
    std::vector<int> ids(tiers_.size(), -1);
    int registered = 0;
    for (size_t t = 0; t < tiers_.size(); ++t) {
      absl::StatusOr<int> id = tiers_[t]->device->RegisterRegion(base, size);
      if (id.ok()) {
        ids[t] = *id;
        ++registered;
      } else if (status.ok()) {
        status = id.status();
      }
    }
    if (registered > 0) {
      status = absl::OkStatus();  // tiers that refused use plain buffers
      regions_[base] = std::move(ids);
    }
  });
  return status;
}

void Engine::UnregisterMemory(void* base) {
  RunOnLoop([&] {
    auto it = regions_.find(base);
    if (it == regions_.end()) return;
    for (size_t t = 0; t < tiers_.size(); ++t) {
      if (it->second[t] >= 0) tiers_[t]->device->UnregisterRegion(it->second[t]);
    }
    regions_.erase(it);
  });
}

void Engine::SetPolicies(const Policies& policies) {
  RunOnLoop([&] {
    pending_policies_ = policies;
    MaybeApplyPolicies();
  });
}

void Engine::MaybeApplyPolicies() {
  if (!pending_policies_ || !router_.empty()) return;
  policies_ = *pending_policies_;
  pending_policies_.reset();
  router_.SetPolicy(policies_.routing, policies_.batching);
  std::lock_guard lock(mu_);
  public_policies_ = policies_;
}

Policies Engine::policies() const {
  std::lock_guard lock(mu_);
  return public_policies_;
}

StoreStats Engine::Stats() const {
  std::lock_guard lock(mu_);
  StoreStats s = totals_;
  s.chunks = index_->size();
  s.staged_bytes = staged_bytes_;
  s.staged_chunks = staged_chunks_;
  s.staging_limit_bytes = config_.staging_limit_bytes;
  s.policies = public_policies_;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const Tier& tier = *tiers_[t];
    const DeviceProperties& p = tier.device->properties();
    TierStats ts;
    ts.name = tier.name;
    ts.path = config_.tiers[t].path;
    ts.direct_io = p.direct_io;
    ts.mem_alignment = p.mem_alignment;
    ts.offset_alignment = p.offset_alignment;
    ts.fixed_buffers = p.fixed_buffers;
    ts.queue_depth = tier.read_depth;
    ts.capacity_bytes = index_->capacity(static_cast<int>(t));
    ts.used_bytes = index_->used(static_cast<int>(t));
    ts.chunks = index_->replicas(static_cast<int>(t));
    ts.bytes_read = tier.bytes_read;
    ts.blocks_read = tier.blocks_read;
    ts.bytes_written = tier.bytes_written;
    ts.replicas_written = tier.replicas_written;
    ts.read_errors = tier.read_errors;
    ts.checksum_failures = tier.checksum_failures;
    ts.write_errors = tier.write_errors;
    ts.evictions = tier.evictions;
    ts.bounce_reads = tier.bounce_reads;
    ts.resubmits = tier.device->resubmits();
    ts.fixed_ops = tier.device->fixed_ops();
    ts.reference_bandwidth_bps = tier.reference_bps;
    s.tiers.push_back(std::move(ts));
  }
  return s;
}

std::vector<StepRecord> Engine::RecentSteps(size_t max) const {
  std::lock_guard lock(mu_);
  const size_t n = std::min(max, history_.size());
  return std::vector<StepRecord>(history_.end() - static_cast<std::ptrdiff_t>(n), history_.end());
}

// ---------------------------------------------------------------------------------------------
// The loop.

void Engine::Loop() {
  std::vector<IoCompletion> completions;
  while (true) {
    bool progress = TakeInbox();
    completions.clear();
    for (size_t t = 0; t < tiers_.size(); ++t) {
      const size_t before = completions.size();
      tiers_[t]->device->Reap(&completions);
      for (size_t i = before; i < completions.size(); ++i) {
        const uint64_t tag = completions[i].tag;
        const uint32_t slot = static_cast<uint32_t>(tag & ((1ull << kTierShift) - 1));
        if (tag & kWriteTagBit) {
          HandleWrite(static_cast<int>(t), slot, completions[i].result);
        } else {
          HandleRead(static_cast<int>(t), slot, completions[i].result);
        }
      }
    }
    progress |= !completions.empty();
    for (size_t t = 0; t < tiers_.size(); ++t) ScheduleReads(static_cast<int>(t));
    for (size_t t = 0; t < tiers_.size(); ++t) ScheduleWrites(static_cast<int>(t));
    for (auto& tier : tiers_) tier->device->Submit();

    bool idle;
    {
      std::lock_guard lock(mu_);
      idle = inbox_steps_.empty() && inbox_jobs_.empty() && inbox_commands_.empty() &&
             steps_.empty() && jobs_.empty() && outstanding_jobs_.empty();
      if (stopping_ && idle) {
        loop_exited_ = true;
        break;
      }
    }
    if (!progress) reactor_->Wait(kIdleWaitNs);
  }
}

bool Engine::TakeInbox() {
  std::vector<std::unique_ptr<Step>> steps;
  std::vector<std::unique_ptr<WriteJob>> jobs;
  std::vector<std::function<void()>> commands;
  std::vector<std::pair<Step*, uint32_t>> finished;
  {
    std::lock_guard lock(mu_);
    steps.swap(inbox_steps_);
    jobs.swap(inbox_jobs_);
    commands.swap(inbox_commands_);
    for (auto& step : steps) PlaceStep(step.get(), &finished);
  }
  for (auto& fn : commands) fn();
  for (auto& job : jobs) jobs_.push_back(std::move(job));
  for (auto& step : steps) steps_.push_back(std::move(step));
  for (auto& [step, chunk] : finished) FinishChunk(step, chunk, step->results[chunk].status);
  for (auto& step : steps_) {
    if (step->unfinished == 0 && step->end_ns == 0) CompleteStep(step.get());
  }
  std::erase_if(steps_, [](const std::unique_ptr<Step>& s) { return s->end_ns != 0; });
  return !steps.empty() || !jobs.empty() || !commands.empty();
}

// REQUIRES: mu_ held.
void Engine::PlaceStep(Step* step, std::vector<std::pair<Step*, uint32_t>>* finished) {
  const size_t n = step->reads.size();
  step->start_ns = reactor_->NowNs();
  step->results.resize(n);
  step->metas.resize(n);
  step->stems.resize(n);
  step->errors.resize(n);
  step->per_tier.resize(tiers_.size());
  for (size_t i = 0; i < n; ++i) {
    const ChunkRead& read = step->reads[i];
    ChunkResult& result = step->results[i];
    result.index = i;
    IndexEntry* e = nullptr;
    if (absl::Status s = ValidateKey(read.key); !s.ok()) {
      result.status = s;
    } else if (e = index_->Find(read.key); e == nullptr || e->tiers == 0) {
      result.status = absl::NotFoundError(absl::StrCat("no tier holds '", read.key, "'"));
      e = nullptr;
    } else if (read.dst == nullptr || read.dst_capacity < e->meta->payload_size) {
      result.status = absl::OutOfRangeError(absl::StrCat("destination of ", read.dst_capacity,
                                                         " bytes is smaller than the chunk's ",
                                                         e->meta->payload_size));
      e = nullptr;
    }
    if (e == nullptr) {
      step->AddChunk(0, 0);
      finished->emplace_back(step, static_cast<uint32_t>(i));
      continue;
    }
    if (e->meta->segment_count() == 0) {  // cannot come from a valid file; never wait on it
      result.status = absl::DataLossError(absl::StrCat("'", read.key, "' has no payload"));
      step->AddChunk(0, 0);
      finished->emplace_back(step, static_cast<uint32_t>(i));
      continue;
    }
    index_->Pin(e);
    index_->Touch(e);
    step->metas[i] = e->meta;
    step->stems[i] = e->stem;
    step->eligible |= e->tiers;
    result.size = e->meta->payload_size;
    step->AddChunk(e->tiers, e->meta->segment_count());
  }
  router_.Add(step);
}

void Engine::ScheduleReads(int t) {
  Tier& tier = *tiers_[t];
  BlockRef ref;
  while (!tier.free_reads.empty() && router_.Claim(t, &ref)) IssueRead(t, ref);
}

void Engine::IssueRead(int t, BlockRef ref) {
  Tier& tier = *tiers_[t];
  Step* step = static_cast<Step*>(ref.batch);
  const PoolBlock& blk = step->blocks[ref.block];
  const ChunkMeta& meta = *step->metas[blk.chunk];
  absl::StatusOr<FileHandle> file = tier.device->OpenChunk(step->stems[blk.chunk]);
  if (!file.ok()) {
    ++tier.read_errors;
    // A missing file is a lost replica; other errors (EMFILE, ENOMEM...) only fail over.
    BlockFailed(t, step, ref, std::string(file.status().message()), absl::IsNotFound(file.status()));
    return;
  }
  const uint32_t index = tier.free_reads.back();
  tier.free_reads.pop_back();
  Tier::ReadSlot& slot = tier.read_slots[index];
  const uint64_t start = uint64_t{blk.segment} * meta.segment_size;
  const DeviceProperties& props = tier.device->properties();
  slot.ref = ref;
  slot.length = static_cast<uint32_t>(meta.segment_length(blk.segment));
  slot.dst = static_cast<uint8_t*>(step->reads[blk.chunk].dst) + start;
  const uint32_t read_length = static_cast<uint32_t>(AlignUp(slot.length, props.offset_alignment));
  const bool via_bounce = reinterpret_cast<uintptr_t>(slot.dst) % props.mem_alignment != 0 ||
                          start + read_length > step->reads[blk.chunk].dst_capacity;
  slot.oversized.reset();
  slot.target = slot.dst;
  if (via_bounce) {
    ++tier.bounce_reads;
    slot.target = slot.bounce;
    if (read_length > slot.bounce_capacity) {
      slot.oversized = AllocateAligned(read_length);
      slot.target = slot.oversized.get();
    }
  }
  Step::PerTier& pt = step->per_tier[t];
  if (pt.in_flight++ == 0) pt.busy_since = reactor_->NowNs();
  tier.device->Queue({MakeTag(false, t, index), IoKind::kRead, *file, meta.header_size() + start,
                      read_length, slot.target});
}

void Engine::HandleRead(int t, uint32_t index, int32_t result) {
  Tier& tier = *tiers_[t];
  Tier::ReadSlot& slot = tier.read_slots[index];
  const BlockRef ref = slot.ref;
  tier.free_reads.push_back(index);
  Step* step = static_cast<Step*>(ref.batch);
  const PoolBlock& blk = step->blocks[ref.block];
  const uint32_t chunk = blk.chunk;
  Step::PerTier& pt = step->per_tier[t];
  if (--pt.in_flight == 0) pt.busy_ns += reactor_->NowNs() - pt.busy_since;
  if (result < 0) {
    ++tier.read_errors;
    spdlog::warn("tier {}: read of '{}' failed: {}", tier.name, step->reads[chunk].key, std::strerror(-result));
    // EIO and a short file (ENODATA) mean this copy is bad; anything else may be transient.
    const bool bad_copy = result == -EIO || result == -ENODATA || result == -ENOENT;
    BlockFailed(t, step, ref, absl::StrCat("read error on tier ", tier.name, ": ", std::strerror(-result)),
                bad_copy);
    return;
  }
  if (slot.target != slot.dst) std::memcpy(slot.dst, slot.target, slot.length);
  const ChunkMeta& meta = *step->metas[chunk];
  if (config_.verify_checksums && Checksum(slot.dst, slot.length) != meta.segment_checksums[blk.segment]) {
    ++tier.checksum_failures;
    spdlog::warn("tier {}: block {} of '{}' fails its checksum", tier.name, blk.segment, step->reads[chunk].key);
    BlockFailed(t, step, ref, absl::StrCat("checksum mismatch on tier ", tier.name), true);
    return;
  }
  router_.Done(ref);
  ++tier.blocks_read;
  tier.bytes_read += slot.length;
  ++pt.blocks;
  pt.bytes += slot.length;
  step->results[chunk].tier_mask |= 1u << t;
  SettleChunk(step, chunk);
}

void Engine::BlockFailed(int t, Step* step, BlockRef ref, const std::string& why, bool drop_replica) {
  const uint32_t chunk = step->blocks[ref.block].chunk;
  step->errors[chunk] = why;
  router_.Fail(ref, t);
  if (drop_replica) {
    // Drop the bad copy, unless the key was rewritten since this step placed it (then the file
    // on this tier may be the new version, and this step's read simply fails over).
    std::vector<Victim> victims;
    {
      std::lock_guard lock(mu_);
      const IndexEntry* e = index_->Find(step->reads[chunk].key);
      Victim v;
      if (e != nullptr && e->meta == step->metas[chunk] && index_->RemoveReplica(step->reads[chunk].key, t, &v)) {
        victims.push_back(std::move(v));
      }
    }
    RemoveFiles(victims);
  }
  // Other chunks of this step on the same tier are unaffected; only this chunk loses the tier.
  SettleChunk(step, chunk);
}

void Engine::SettleChunk(Step* step, uint32_t chunk) {
  switch (Router::ChunkOutcome(*step, chunk)) {
    case Router::Outcome::kPending:
      return;
    case Router::Outcome::kComplete:
      FinishChunk(step, chunk, absl::OkStatus());
      break;
    case Router::Outcome::kFailed:
      FinishChunk(step, chunk, absl::DataLossError(absl::StrCat("no intact replica of '", step->reads[chunk].key,
                                                                "' (", step->errors[chunk], ")")));
      break;
  }
  if (step->unfinished == 0) CompleteStep(step);
}

void Engine::FinishChunk(Step* step, uint32_t chunk, absl::Status status) {
  ChunkResult& result = step->results[chunk];
  result.status = std::move(status);
  if (!result.status.ok()) result.size = 0;
  router_.Finish(step, chunk);
  {
    std::lock_guard lock(mu_);
    if (step->metas[chunk]) index_->Unpin(step->reads[chunk].key);
    if (result.status.ok()) {
      ++totals_.retrieve_hits;
    } else if (absl::IsNotFound(result.status)) {
      ++totals_.retrieve_misses;
    } else {
      ++totals_.retrieve_failures;
    }
  }
  if (step->on_chunk) step->on_chunk(result);
}

void Engine::CompleteStep(Step* step) {
  if (step->end_ns != 0) return;
  step->end_ns = std::max(reactor_->NowNs(), step->start_ns + 1);
  router_.Remove(step);
  StepRecord rec;
  rec.start_unix_ns = UnixNowNs() - (step->end_ns - step->start_ns);
  rec.chunks = static_cast<uint32_t>(step->results.size());
  for (const ChunkResult& r : step->results) {
    if (r.status.ok()) {
      ++rec.hits;
      rec.bytes += r.size;
    } else if (absl::IsNotFound(r.status)) {
      ++rec.misses;
    } else {
      ++rec.failed;
    }
  }
  rec.wall_seconds = (step->end_ns - step->start_ns) / 1e9;
  rec.routing = ToString(policies_.routing);
  rec.batching = std::string(ToString(policies_.batching));
  double sum_bps = 0;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const Step::PerTier& pt = step->per_tier[t];
    Tier& tier = *tiers_[t];
    TierStepStats ts;
    ts.tier = tier.name;
    ts.blocks = pt.blocks;
    ts.bytes = pt.bytes;
    ts.busy_seconds = pt.busy_ns / 1e9;
    ts.eligible = step->eligible & (1u << t);
    if (pt.bytes > 0 && pt.busy_ns > 0) {
      ts.bandwidth_bps = pt.bytes / ts.busy_seconds;
      const double old = tier.reference_bps;
      tier.reference_bps = old == 0 ? ts.bandwidth_bps
                                    : (1 - kReferenceWeight) * old + kReferenceWeight * ts.bandwidth_bps;
    } else {
      ts.bandwidth_bps = tier.reference_bps;
    }
    if (ts.eligible) sum_bps += ts.bandwidth_bps;
    rec.tiers.push_back(std::move(ts));
  }
  if (sum_bps > 0 && rec.bytes > 0) {
    rec.bound_seconds = rec.bytes / sum_bps;
    rec.gap = rec.wall_seconds / rec.bound_seconds - 1;
  }
  {
    std::lock_guard lock(mu_);
    rec.id = next_step_id_++;
    ++totals_.steps;
    history_.push_back(rec);
    if (history_.size() > kHistoryLimit) history_.pop_front();
  }
  MaybeApplyPolicies();  // after the record names the policies that ran this step
  if (step->on_done) step->on_done(std::move(rec));
}

// ---------------------------------------------------------------------------------------------
// Writes (M2, M3).

bool Engine::WritesAllowed() const {
  if (policies_.writes == WritePolicy::kImmediate || router_.empty()) return true;
  // Pressure: staging above its high-water mark, or a producer blocked on staging space.
  if (draining_ || space_waiters_ > 0) return true;
  return staged_bytes_seen_ > config_.staging_high_water * config_.staging_limit_bytes;
}

void Engine::ScheduleWrites(int t) {
  if (jobs_.empty()) return;
  {
    std::lock_guard lock(mu_);
    staged_bytes_seen_ = staged_bytes_;
  }
  Tier& tier = *tiers_[t];
  const bool during_reads = !router_.empty();
  for (size_t j = 0; j < jobs_.size() && !tier.free_writes.empty() && WritesAllowed(); ++j) {
    WriteJob* job = jobs_[j].get();
    if (!job->started) {
      // First look at this job: which tiers need a replica (M3), and which already hold it.
      job->started = true;
      job->replicas.resize(tiers_.size());
      std::lock_guard lock(mu_);
      const IndexEntry* e = index_->FindLive(job->meta->key);
      const bool same = e != nullptr && e->meta->payload_checksum == job->meta->payload_checksum &&
                        e->meta->payload_size == job->meta->payload_size;
      for (size_t k = 0; k < tiers_.size(); ++k) {
        auto& r = job->replicas[k];
        r.target = config_.replication == ReplicationPolicy::kAll || k == 0;
        if (!r.target) continue;
        if (same && (e->tiers & (1u << k))) {
          job->durable |= 1u << k;  // already there, byte-identical
          r.state = WriteJob::State::kDone;
        } else {
          r.state = WriteJob::State::kPending;
        }
      }
    }
    auto& r = job->replicas[t];
    if (r.state == WriteJob::State::kPending && !StartReplica(job, t)) continue;
    while (r.state == WriteJob::State::kWriting && r.next_offset < job->image_size &&
           !tier.free_writes.empty()) {
      const uint32_t index = tier.free_writes.back();
      tier.free_writes.pop_back();
      tier.write_slots[index] = {job, false};
      const uint32_t length =
          static_cast<uint32_t>(std::min<uint64_t>(config_.block_size, job->image_size - r.next_offset));
      tier.device->Queue({MakeTag(true, t, index), IoKind::kWrite, r.temp, r.next_offset, length,
                          job->image.get() + r.next_offset});
      r.next_offset += length;
      ++r.in_flight;
      if (during_reads) {
        std::lock_guard lock(mu_);
        ++totals_.writes_under_pressure;
      }
    }
  }
  // Jobs that needed nothing (every replica already present) complete here.
  for (size_t j = 0; j < jobs_.size();) {
    WriteJob* job = jobs_[j].get();
    const size_t before = jobs_.size();
    MaybeCompleteJob(job);
    if (jobs_.size() == before) ++j;
  }
}

bool Engine::StartReplica(WriteJob* job, int t) {
  auto& r = job->replicas[t];
  absl::StatusOr<FileHandle> temp = tiers_[t]->device->CreateTemp(job->stem);
  if (!temp.ok()) {
    ++tiers_[t]->write_errors;
    FinishReplica(job, t, temp.status());
    return false;
  }
  std::vector<Victim> victims;
  bool room;
  {
    std::lock_guard lock(mu_);
    room = index_->MakeRoom(t, job->image_size, &victims);
    if (room) index_->Reserve(t, job->image_size);
    tiers_[t]->evictions += victims.size();
  }
  RemoveFiles(victims);
  if (!room) {
    tiers_[t]->device->AbortTemp(*temp);
    FinishReplica(job, t, absl::ResourceExhaustedError(absl::StrCat(
                              "tier ", tiers_[t]->name, " cannot make room for ", job->image_size, " bytes")));
    return false;
  }
  r.temp = *temp;
  r.next_offset = 0;
  r.state = WriteJob::State::kWriting;
  return true;
}

void Engine::HandleWrite(int t, uint32_t index, int32_t result) {
  Tier& tier = *tiers_[t];
  const Tier::WriteSlot slot = tier.write_slots[index];
  tier.free_writes.push_back(index);
  WriteJob* job = slot.job;
  auto& r = job->replicas[t];
  --r.in_flight;
  if (result < 0 && r.error.ok()) {
    ++tier.write_errors;
    r.error = absl::InternalError(absl::StrCat("write to tier ", tier.name, " failed: ", std::strerror(-result)));
    spdlog::warn("{}", std::string(r.error.message()));
  }
  if (r.in_flight > 0) return;
  if (!r.error.ok() || (r.state == WriteJob::State::kWriting && r.next_offset < job->image_size)) {
    if (!r.error.ok()) {
      tier.device->AbortTemp(r.temp);
      {
        std::lock_guard lock(mu_);
        index_->Release(t, job->image_size);
      }
      FinishReplica(job, t, r.error);
    }
    return;
  }
  if (r.state == WriteJob::State::kWriting && config_.fsync == FsyncPolicy::kChunk) {
    const uint32_t sync_index = tier.free_writes.back();  // the slot just freed
    tier.free_writes.pop_back();
    tier.write_slots[sync_index] = {job, true};
    tier.device->Queue({MakeTag(true, t, sync_index), IoKind::kSync, r.temp, 0, 0, nullptr});
    r.state = WriteJob::State::kSyncing;
    ++r.in_flight;
    return;
  }
  bool superseded;
  {
    // Writes of one key may complete out of order: never rename an older version over a newer.
    std::lock_guard lock(mu_);
    const IndexEntry* e = index_->Find(job->meta->key);
    superseded = e != nullptr && e->meta->created_unix_ns > job->meta->created_unix_ns &&
                 e->meta->payload_checksum != job->meta->payload_checksum;
    if (superseded) index_->Release(t, job->image_size);
  }
  if (superseded) {
    tier.device->AbortTemp(r.temp);
    FinishReplica(job, t, absl::OkStatus());  // done, not durable: a newer write holds the key
    return;
  }
  absl::Status committed = tier.device->CommitTemp(r.temp, job->stem, config_.fsync == FsyncPolicy::kChunk);
  std::vector<Victim> stale;
  {
    std::lock_guard lock(mu_);
    index_->Release(t, job->image_size);
    if (committed.ok()) stale = index_->AddReplica(t, job->meta);
  }
  RemoveFiles(stale);
  if (committed.ok()) {
    tier.bytes_written += job->image_size;
    ++tier.replicas_written;
    job->durable |= 1u << t;
  } else {
    ++tier.write_errors;
  }
  FinishReplica(job, t, committed);
}

void Engine::FinishReplica(WriteJob* job, int t, absl::Status status) {
  auto& r = job->replicas[t];
  r.state = status.ok() ? WriteJob::State::kDone : WriteJob::State::kFailed;
  r.error = std::move(status);
  MaybeCompleteJob(job);
}

void Engine::MaybeCompleteJob(WriteJob* job) {
  if (!job->started) return;
  absl::Status first_error;
  for (const auto& r : job->replicas) {
    if (r.state != WriteJob::State::kDone && r.state != WriteJob::State::kFailed) return;
    if (r.state == WriteJob::State::kFailed && first_error.ok()) first_error = r.error;
  }
  PersistResult result;
  result.tier_mask = job->durable;
  result.status = job->durable != 0 ? absl::OkStatus() : first_error;
  auto it = std::find_if(jobs_.begin(), jobs_.end(), [job](const auto& j) { return j.get() == job; });
  std::unique_ptr<WriteJob> owned = std::move(*it);
  jobs_.erase(it);
  {
    std::lock_guard lock(mu_);
    staged_bytes_ -= job->image_size;
    --staged_chunks_;
    ++totals_.persists;
    if (!result.status.ok()) ++totals_.persist_failures;
  }
  cv_.notify_all();  // staging space for blocked producers
  if (job->callback) job->callback(job->meta->key, result);
  {
    // Only now does Flush see the job as done: its callback has run.
    std::lock_guard lock(mu_);
    outstanding_jobs_.erase(job->seq);
  }
  cv_.notify_all();
}

void Engine::RemoveFiles(const std::vector<Victim>& victims) {
  for (const Victim& v : victims) {
    absl::Status s = tiers_[v.tier]->device->RemoveChunk(v.stem);
    if (!s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("tier {}: cannot remove '{}': {}", tiers_[v.tier]->name, v.key, std::string(s.message()));
    }
  }
}

}  // namespace kvstream
