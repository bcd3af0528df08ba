// Measuring a running kvstreamd: one session per tensor-parallel rank, reading (and writing) every
// step of the workload concurrently under each run's policies, and fio as the reference for one
// tier read without the daemon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "bench_math.h"
#include "kvstream/client.h"
#include "plan.h"
#include "workload.h"

namespace kvbench {

// Runs before each measured step, with the step's index.
using StepHook = std::function<void(size_t step)>;

// A hook that runs `command` through the shell with {step} replaced by the step's index, and
// reports on stderr when it fails; no hook for an empty command.
StepHook ShellStepHook(const std::string& command);

// Fails, naming the tier, when a tier reads through the page cache (buffered I/O) and
// `allow_buffered` is false: the page cache, not the tier, would then serve the reads.
absl::Status RequireDirectIo(const kvstream::StoreStats& stats, bool allow_buffered);

// One session per rank 0..ranks-1, each with an arena of `arena_bytes`. The error names the rank
// and the arena size.
absl::StatusOr<std::vector<std::unique_ptr<kvstream::Client>>> AttachRanks(const std::string& socket, uint32_t ranks,
                                                                            uint64_t arena_bytes);

class Bench {
 public:
  // `ranks`: one session per rank, their arenas laid out as PlanArena says with `read_slots` read
  // slots; `control`: a connection to the same daemon, which must outlive the Bench.
  Bench(std::vector<std::unique_ptr<kvstream::Client>> ranks, kvstream::Client* control, Workload workload,
        size_t read_slots);

  ~Bench();

  // From now on every rank reads into a client region instead of its arena: an unsealed
  // /dev/shm file of the arena's size (as a serving engine's own shared-memory pool), which the
  // daemon reaches through its descriptor (client_region.h); `device_pinned`: added as memory a
  // device pinned (the daemon reads into it through bounce buffers).
  absl::Status ReadIntoClientRegions(bool device_pinned);

  // Stores every chunk the steps read, on every tier, skipping those already there, and locks
  // them all against capacity eviction until the Bench is destroyed (at most an hour, the longest
  // lease): what the runs write (never read again) is what the daemon's LRU evicts, as a serving
  // engine pins the chunks it is about to read. Without the locks, writes beyond a tier's capacity
  // evicted chunks the steps read, and those steps then read them from another tier.
  absl::Status Populate();
  // As Populate's locks, for chunks stored already (kvbench --no-populate).
  absl::Status LockReadChunks();

  // From now on every run first reads every step once under its own policies, untimed (no
  // writes, no idle), so that it starts from its own steady state rather than the one the run
  // before it left: on the emulated tiers the blkio throttle credits a tier the idle time a
  // previous policy left it, and that credit lasts about a run (docs/design-notes.md).
  void WarmUpEachRun(bool on) { warm_up_ = on; }

  // From now on, before each measured step (after its hook and idle time, as a client would before
  // retrieving), one Lookup with the daemon's load estimate over every rank's keys of the step;
  // the last entry's load_seconds is the step's estimate (StepSample::estimate_seconds).
  void EstimateEachStep(bool on) { estimate_ = on; }

  // Runs every step under `spec`; `hook` (if any) runs before each step (of the warm-up pass too).
  absl::StatusOr<Run> Measure(const RunSpec& spec, const StepHook& hook);

  // Measures each run in order, logging its total time on stderr; stops at the first failure.
  // Either way the daemon is left with the policies `restore` (those it had before).
  absl::StatusOr<std::vector<Run>> MeasureAll(const std::vector<RunSpec>& runs, const StepHook& hook,
                                              const kvstream::Policies& restore);

  // How long a tier idles between two chunks read one after another, per alone run in `alone`
  // (its routing keeps the reads on its tier): serial batching issues a chunk's first block only
  // once the chunk before it is done, so its tier drains at every chunk boundary, where step
  // batching keeps blocks of the next chunks in flight. A probe step (the first `chunks` chunks of
  // each rank's part of the workload's first step, every rank at once) is read with serial
  // batching and with step batching, `pairs` times, each read after the same idle time (a blkio
  // throttle credits idle time) and the two batchings taking turns going first; the drain is the
  // median of the pairs' differences over the probe's chunk boundaries (kvsim --validate's serial
  // model adds one per further chunk of a step to the tier's alone time). The daemon is left with
  // `restore`. None (an empty vector) when the probe step has fewer than two chunks.
  absl::StatusOr<std::vector<double>> MeasureChunkDrains(const std::vector<RunSpec>& alone, size_t chunks, int pairs,
                                                         const kvstream::Policies& restore);

  const Workload& workload() const { return w_; }

 private:
  // Rank r retrieves the step's chunks into its read slots and checks each one's size and tag.
  absl::Status ReadStep(uint32_t r, const BenchStep& step);
  // Rank r persists the step's new chunks from the slots after the read slots (content unchecked),
  // under keys of this run only (`run`): a later run writes them again rather than finding them
  // stored already, and no run's reads ever see them. Returns the seconds from the call until
  // every chunk was written; fails with the first chunk that is written nowhere (the run's numbers
  // would count writes that did not happen).
  absl::StatusOr<double> WriteStep(uint32_t r, const BenchStep& step, size_t run);
  // The persists of one run: each one's seconds (WriteStep) and the first failure.
  struct PersistLog {
    absl::Mutex mu;
    std::vector<double> seconds ABSL_GUARDED_BY(mu);
    absl::Status status ABSL_GUARDED_BY(mu);
    void Add(const absl::StatusOr<double>& persisted) ABSL_LOCKS_EXCLUDED(mu);
  };
  // Locks those of rank r's `keys` that are stored against capacity eviction (Lookup with a
  // lease), remembered for the destructor to unlock; returns the lookup of each key.
  absl::StatusOr<std::vector<kvstream::LookupEntry>> LockChunks(uint32_t r, const std::vector<std::string>& keys);
  // Every rank reads `step` at once and, for run `write_run`, persists the step's new chunks
  // (WriteStep, into `log`) from the same start; returns when the reads are done and the writes
  // written, or with the first failure (reads first). With `background`, the writes' threads go
  // there instead, for the caller to join: the step returns once its reads are done.
  struct StepTimes {
    double start = 0;  // Now() at the release of the ranks
    double reads = 0;  // until the last rank's reads are done
    double cycle = 0;  // until the writes are written too (the reads' time without writes)
  };
  absl::StatusOr<StepTimes> RunStep(const BenchStep& step, std::optional<size_t> write_run, PersistLog* log = nullptr,
                                    std::vector<std::thread>* background = nullptr);
  // The daemon's load estimate for every rank's reads of `step` (EstimateEachStep); fails when a
  // chunk is not stored (the estimate would not cover the step).
  absl::StatusOr<double> EstimateStep(const BenchStep& step);
  // One chunk drain of MeasureChunkDrains: `probe` under `routing`.
  absl::StatusOr<double> MeasureChunkDrain(const std::string& routing, const BenchStep& probe, int pairs);
  void RestorePolicies(const kvstream::Policies& policies);
  // Changes the policies the texts name ("" keeps one: kvstream::ChangePolicies) from those in
  // force on the daemon.
  absl::Status ChangePolicies(const std::string& routing, const std::string& batching, const std::string& writes,
                              const std::string& replication);

  // Where rank r reads into: its arena, or its client region.
  struct ReadMemory {
    uint8_t* data = nullptr;
    uint32_t region = 0;
  };
  ReadMemory ReadTarget(uint32_t r) const;
  struct ClientRegion {
    int fd = -1;
    uint8_t* data = nullptr;
    uint64_t size = 0;
    uint32_t id = 0;
  };

  std::vector<std::unique_ptr<kvstream::Client>> ranks_;
  std::vector<ClientRegion> regions_;  // per rank, when reading into client regions
  static constexpr double kLockSeconds = 3600;
  std::vector<std::vector<std::string>> locked_;  // per rank: keys this Bench locked
  size_t runs_measured_ = 0;
  bool warm_up_ = false;
  bool estimate_ = false;
  kvstream::Client* control_;
  Workload w_;
  size_t read_slots_;
};

// fio on tiers' chunk files (O_DIRECT, io_uring, same block size and depth), one job per
// directory, all at once: the reference for "the tiers through the daemon". Returns the summed
// bytes/s, or 0 when fio is unavailable or fails.
double FioBandwidth(const std::vector<std::string>& dirs, uint64_t block, uint32_t depth);

}  // namespace kvbench
