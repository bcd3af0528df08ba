// Engine: the Store behind Store::Open, and its I/O completion loop. One thread owns the devices
// and runs the loop: take new steps and commands from the inbox, reap every tier's completions
// and hand each to the step reader (reads) or the replicator (writes), let every tier claim reads
// from the step pool, then writes when the write stager allows, submit, and wait. Client threads
// reach it through the inbox (steps, commands), the write stager (persists) and the index's own
// lock (lookups). Tests build it on SimDevices directly.
// The layers it ties together, file by file: docs/design.md, "Source map".
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/shared_lookup.h"
#include "index/index.h"
#include "io/reactor.h"
#include "io/tier.h"
#include "kvstream/config.h"
#include "kvstream/store.h"
#include "memory/memory_regions.h"
#include "memory/page_faulter.h"
#include "model/load_model.h"
#include "read/step_pool.h"
#include "read/step_reader.h"
#include "read/step_record.h"
#include "util/histogram.h"
#include "write/replicator.h"
#include "write/write_stager.h"

namespace kvstream {

class Engine final : public Store {
 public:
  // REQUIRES: devices.size() == config.tiers.size(), config validated. Scans every device,
  // rebuilds the index (evicting down to capacity) and starts the loop thread. `mac_key`: the
  // cluster key loaded from config.shared_key_file (null: none); every chunk written is signed.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(StoreConfig config,
                                                        std::vector<std::unique_ptr<TierDevice>> devices,
                                                        std::shared_ptr<Reactor> reactor,
                                                        std::shared_ptr<const ChunkMacKey> mac_key = nullptr);
  ~Engine() override;

  void RetrieveAsync(std::vector<ChunkRead> step, ChunkCallback on_chunk,
                     std::function<void(StepRecord)> on_done) override;
  absl::Status Persist(std::string_view key, const void* data, size_t size,
                       PersistCallback on_written = nullptr) override;
  absl::Status TryPersist(std::string_view key, const void* data, size_t size,
                          PersistCallback on_written = nullptr) override;
  absl::Status PersistFromFile(std::string_view key, const FileRange& source, PersistCallback on_written,
                               bool wait) override;
  void Flush() override;
  std::vector<LookupEntry> Lookup(const std::vector<std::string>& keys) const override;
  std::vector<LookupEntry> LookupAndLock(const std::vector<std::string>& keys, double lease_seconds) override;
  size_t Unlock(const std::vector<std::string>& keys) override;
  size_t PrefixHits(const std::vector<std::string>& keys) const override;
  std::vector<double> LoadSeconds(const std::vector<LookupEntry>& entries) const override;
  absl::StatusOr<EvictResult> Evict(const EvictRequest& request) override;
  absl::Status RegisterMemory(void* base, size_t size, int fd = -1, uint64_t fd_offset = 0) override;
  void UnregisterMemory(void* base) override;
  bool SetPolicies(const Policies& policies) override;
  Policies policies() const override;
  StoreStats Stats() const override;
  std::vector<StepRecord> RecentSteps(size_t max) const override;
  const StoreConfig& config() const override { return config_; }

  // Stops taking work, finishes pending steps and staged writes, and joins the loop.
  void Shutdown();
  // Whether every piece of the memory registered at `base` is registered by now (RegisterMemory
  // returns before): for tests and tools that need its fixed buffers in place.
  bool MemoryRegistered(const void* base);

 private:
  Engine(StoreConfig config, Tiers tiers, std::shared_ptr<Reactor> reactor);
  void Loop();
  // Moves new steps, staged chunks and commands into the loop; returns whether there were any.
  bool TakeInbox();
  // Runs `fn` on the loop thread and waits for it (on the caller's thread once the loop exited).
  void RunOnLoop(const std::function<void()>& fn);
  // Queues `fn` for the loop thread and returns; dropped once the loop exited.
  void Post(std::function<void()> fn);
  // Loop: records a finished step and applies policies waiting for the pool to drain.
  void StepFinished(StepRecord* record);
  void MaybeApplyPolicies();
  // Loop: stages a chunk just read from another node's file on a shared tier for this node's own
  // tiers (cross-node reuse), unless staging is full.
  void StageForeignRead(const ChunkRead& read, const ChunkMeta& meta);
  // Whether `key` is in the index or in staging, and its newest version's size and written tiers.
  LookupEntry Present(std::string_view key) const ABSL_SHARED_LOCKS_REQUIRED(index_.mu());
  // Loop: whether everything taken in is done (no step, no write, nothing staged).
  bool Idle() const;
  // A persist that did not wait for room: with staging.when_full drop, a refusal for want of it
  // is its final answer, counted and said so.
  absl::Status CountDropped(absl::Status staged, uint64_t bytes);
  // The load estimate (engine_load.cc). The tiers as the load model sees them at `now_ns`: absent when stalled or unreadable, and
  // bit t of `*unmeasured` set (absent too) for a usable tier with no bandwidth measured yet.
  std::vector<TierRate> LoadRates(int64_t now_ns, uint32_t* unmeasured) const;
  // Loop, each turn: the tiers' read times and the bytes queued, for LoadSeconds.
  void PublishLoad();
  // The estimate for a step about to be queued (its last chunk's LoadSeconds).
  double StepEstimate(const std::vector<ChunkRead>& reads) const;
  // A finished step's estimate against its wall time (load_estimate_error_).
  void ObserveEstimate(const StepRecord& record);
  // Loop, about once a second: each tier's Condition; a tier whose directory was deleted is made
  // again (empty), one out of reach is neither read nor written, a read-only one not written.
  void CheckTiers();

  const StoreConfig config_;
  std::shared_ptr<Reactor> reactor_;
  Tiers tiers_;
  GuardedIndex index_;
  StoreCounters counters_;
  StepHistory history_;
  AtomicHistogram step_seconds_{AtomicHistogram::SecondsBuckets()};
  AtomicHistogram step_bound_seconds_{AtomicHistogram::SecondsBuckets()};
  AtomicHistogram step_gap_{AtomicHistogram::GapBuckets()};
  AtomicHistogram load_estimate_error_{AtomicHistogram::ErrorBuckets()};
  std::atomic<uint64_t> queued_read_bytes_{0};  // reads claimed or queued, in bytes (PublishLoad)
  static int64_t SteadyNowNs();  // the steady clock, for loop_ran_ns_
  std::atomic<int64_t> loop_ran_ns_{0};  // when the loop last went round (steady clock)
  WriteStager stager_;

  // Loop-thread state (no lock: only the loop thread touches it once it runs).
  MemoryRegions regions_;  // registered memory (RegisterMemory)
  StepPool pool_;
  StepReader reader_;
  Replicator replicator_;
  // Keys other nodes published on shared tiers, found for lookups and steps (their threads).
  mutable SharedLookup shared_lookup_;
  std::optional<Policies> requested_policies_;  // applied once the pool is empty
  absl::flat_hash_set<std::string> foreign_copies_;  // cross-node copies staged, not yet finished
  int64_t next_tier_check_ns_ = 0;

  mutable absl::Mutex policies_mu_;
  Policies policies_ ABSL_GUARDED_BY(policies_mu_);  // in force

  absl::Mutex inbox_mu_;
  std::vector<std::unique_ptr<ReadStep>> inbox_steps_ ABSL_GUARDED_BY(inbox_mu_);
  std::vector<std::function<void()>> inbox_commands_ ABSL_GUARDED_BY(inbox_mu_);
  bool stopping_ ABSL_GUARDED_BY(inbox_mu_) = false;
  bool loop_exited_ ABSL_GUARDED_BY(inbox_mu_) = false;

  // Faults registered memory in off the loop, piece by piece; the loop registers each piece then.
  PageFaulter faulter_;

  absl::Mutex join_mu_;  // serialises Shutdown's join and commands run after the loop exited
  std::thread thread_;
  // The reconcile pass after a start from saved indexes (catalog/reconcile.h), off the loop.
  void Reconcile(const std::vector<bool>& tiers);
  std::thread reconcile_thread_;
  std::atomic<bool> reconcile_stop_{false};
  std::atomic<bool> reconciling_{false};  // Stats: the pass is running
};

}  // namespace kvstream
