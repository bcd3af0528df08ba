// Engine: the I/O completion loop that drives every tier. One thread owns the devices, the step
// pool (Router) and the write jobs; client threads hand it work through an inbox and a wake-up.
// Store (include/kvstream/store.h) is its public face; tests build it on SimDevices directly.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "index.h"
#include "kvstream/config.h"
#include "kvstream/store.h"
#include "kvstream/types.h"
#include "reactor.h"
#include "router.h"
#include "tier_device.h"

namespace kvstream {

class Engine {
 public:
  // REQUIRES: devices.size() == config.tiers.size(), config validated. Scans every device,
  // rebuilds the index (evicting down to capacity) and starts the loop thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      StoreConfig config, std::vector<std::unique_ptr<TierDevice>> devices,
      std::shared_ptr<Reactor> reactor);
  ~Engine();

  void RetrieveAsync(std::vector<ChunkRead> batch, ChunkCallback on_chunk,
                     std::function<void(StepRecord)> on_done);
  StepRecord Retrieve(std::vector<ChunkRead> batch, std::vector<ChunkResult>* results,
                      ChunkCallback on_chunk);
  absl::Status Persist(std::string_view key, const void* data, size_t size,
                       PersistCallback on_durable, bool block);
  void Flush();
  std::vector<LookupResult> Lookup(const std::vector<std::string>& keys) const;
  size_t PrefixHits(const std::vector<std::string>& keys) const;
  absl::StatusOr<EvictResult> Evict(const EvictRequest& request);
  absl::Status RegisterMemory(void* base, size_t size);
  void UnregisterMemory(void* base);
  void SetPolicies(const Policies& policies);
  Policies policies() const;
  StoreStats Stats() const;
  std::vector<StepRecord> RecentSteps(size_t max) const;
  const StoreConfig& config() const { return config_; }  // as opened

  // Stops taking work, finishes pending retrievals and staged writes, and joins the loop.
  void Shutdown();

 private:
  struct Tier;
  struct Step;
  struct WriteJob;

  Engine(StoreConfig config, std::shared_ptr<Reactor> reactor);
  absl::Status Rebuild();
  void Loop();
  bool TakeInbox();
  void PlaceStep(Step* step, std::vector<std::pair<Step*, uint32_t>>* finished);
  void ScheduleReads(int tier);
  void IssueRead(int tier, BlockRef ref);
  void HandleRead(int tier, uint32_t slot, int32_t result);
  void BlockFailed(int tier, Step* step, BlockRef ref, const std::string& why, bool drop_replica);
  void SettleChunk(Step* step, uint32_t chunk);
  void FinishChunk(Step* step, uint32_t chunk, absl::Status status);
  void CompleteStep(Step* step);
  void ScheduleWrites(int tier);
  bool StartReplica(WriteJob* job, int tier);
  void HandleWrite(int tier, uint32_t slot, int32_t result);
  void FinishReplica(WriteJob* job, int tier, absl::Status status);
  void MaybeCompleteJob(WriteJob* job);
  void RemoveFiles(const std::vector<Victim>& victims);
  bool WritesAllowed() const;
  void MaybeApplyPolicies();
  void RunOnLoop(std::function<void()> fn);

  const StoreConfig config_;
  std::shared_ptr<Reactor> reactor_;
  std::vector<std::unique_ptr<Tier>> tiers_;
  Router router_;
  std::thread thread_;
  std::mutex join_mu_;  // serialises Shutdown's join and commands run after the loop exited

  // Guards the index, the inbox, staging accounting, stats and step history.
  mutable std::mutex mu_;
  std::condition_variable cv_;  // staging space, flush progress, step and command completion
  std::unique_ptr<Index> index_;
  std::vector<std::unique_ptr<Step>> inbox_steps_;
  std::vector<std::unique_ptr<WriteJob>> inbox_jobs_;
  std::vector<std::function<void()>> inbox_commands_;
  bool stopping_ = false;
  bool loop_exited_ = false;
  // Deferred writes may run during reads while these are set (read by the loop without mu_).
  std::atomic<bool> draining_{false};         // Shutdown: write everything staged
  std::atomic<uint32_t> space_waiters_{0};    // Persist calls blocked on staging space
  uint64_t staged_bytes_ = 0;
  uint64_t staged_chunks_ = 0;
  uint64_t next_job_seq_ = 0;
  std::set<uint64_t> outstanding_jobs_;
  std::deque<StepRecord> history_;
  uint64_t next_step_id_ = 0;
  StoreStats totals_;  // the counters of StoreStats not derived elsewhere
  Policies public_policies_;  // what policies() reports: the ones in force

  // Loop-thread state.
  Policies policies_;                         // in force
  std::optional<Policies> pending_policies_;  // applied once no retrieval is pending
  std::vector<std::unique_ptr<Step>> steps_;
  std::deque<std::unique_ptr<WriteJob>> jobs_;
  std::map<void*, std::vector<int>> regions_;  // registered memory -> region id per tier
  std::atomic<uint64_t> staged_bytes_seen_{0};  // staged_bytes_ as the loop last read it
};

}  // namespace kvstream
