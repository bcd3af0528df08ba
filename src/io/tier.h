// Tier: one configured tier as the loop's components share it: its device, its counters and its
// reference bandwidth. The loop thread owns the device; the counters are read by Stats from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "index/victim.h"
#include "io/tier_device.h"
#include "kvstream/tier_counters.h"
#include "util/histogram.h"

namespace kvstream {

class ChunkMacKey;

struct TierCounters {
  // The counters of kvstream/tier_counters.h, each a std::atomic<uint64_t> of the same name.
#define KVSTREAM_TIER_ATOMIC(field, metric, labels, help) std::atomic<uint64_t> field{0};
  KVSTREAM_TIER_COUNTERS(KVSTREAM_TIER_ATOMIC)
#undef KVSTREAM_TIER_ATOMIC
  AtomicHistogram read_seconds{AtomicHistogram::SecondsBuckets()};
  AtomicHistogram write_seconds{AtomicHistogram::SecondsBuckets()};

  void CountError(IoStatus status) {
    if (status == IoStatus::kNoSpace) ++no_space_errors;
    if (status == IoStatus::kGone) ++gone_errors;
    if (status == IoStatus::kMediaError || status == IoStatus::kEndOfFile) ++media_errors;
  }
};

// The kind of a failed file operation's status (ErrnoStatus' codes).
inline IoStatus IoStatusOf(const absl::Status& s) {
  if (absl::IsResourceExhausted(s)) return IoStatus::kNoSpace;
  if (absl::IsNotFound(s)) return IoStatus::kGone;
  if (absl::IsDataLoss(s)) return IoStatus::kMediaError;
  return s.ok() ? IoStatus::kOk : IoStatus::kFailed;
}

// Keeps a flood of failures from flooding the log: at most one line per period, and the next
// line says how many were left out. Loop thread only.
class LogLimiter {
 public:
  // True when a line may be written now; `*left_out` is how many were refused since the last.
  bool Allow(uint64_t* left_out);

 private:
  int64_t next_ns_ = 0;
  uint64_t refused_ = 0;
};

struct Tier {
  std::string name;
  // The configured tier this one is a drive of (TierConfig::group), as an index in configured
  // order (0 = the primary), and the tiers that are its drives (bit k: tier k), this one included.
  // A replica "on the group" is on one of its drives.
  std::string group_name;
  int group = 0;
  uint32_t group_mask = 0;
  std::unique_ptr<TierDevice> device;
  uint32_t read_depth = 0;  // the most reads in flight (read slots)
  // The reads in flight the tier takes now (StepReader's DepthTuner; stats read it).
  std::atomic<uint32_t> read_depth_now{0};
  uint32_t write_depth = 0;
  // A shared tier with a cluster key: every block read from it must match its segment's tag under
  // this key (anyone may write the tier); null: blocks are verified against their checksums.
  std::shared_ptr<const ChunkMacKey> payload_key;
  TierCounters counters;
  LogLimiter write_log;  // failed writes (loop thread)
  LogLimiter read_log;   // failed reads (loop thread)
  // Its bandwidth in recent steps: bytes over busy time, both moving averages (ReferenceRate).
  std::atomic<double> reference_bps{0};
  std::atomic<bool> stalled{false};      // a read is past its deadline: the tier claims nothing new
  // What the load estimate (Engine::LoadSeconds) reads besides the above, published by the loop
  // each turn: a read's usual time from issue to landing (0 before one landed), and the issue
  // time on the reactor's clock of the oldest read in flight (0: none in flight).
  std::atomic<double> usual_read_seconds{0};
  std::atomic<int64_t> oldest_read_ns{0};
  // From the periodic Condition check (loop thread writes): a tier that cannot be read claims
  // nothing; one that cannot be written gets no replicas; `condition` says why ("" when usable).
  std::atomic<bool> readable{true};
  std::atomic<bool> writable{true};
  // Its file system does not answer (TierCondition::kNotAnswering): stalled, its chunks indexed.
  std::atomic<bool> not_answering{false};
  mutable absl::Mutex condition_mu;
  std::string condition ABSL_GUARDED_BY(condition_mu);
};

using Tiers = std::vector<std::unique_ptr<Tier>>;

// Whether a group a chunk should have a replica on holds none: the primary group when
// `primary_only`, else any group. `holders`: bit k, tier k holds it.
bool GroupMissing(const Tiers& tiers, uint32_t holders, bool primary_only);

// Counters of the whole store's reads and writes (StoreStats), written by the loop.
struct StoreCounters {
  std::atomic<uint64_t> retrieve_hits{0}, retrieve_misses{0}, retrieve_failures{0};
  std::atomic<uint64_t> writes_under_pressure{0};
  std::atomic<uint64_t> persists_dropped{0}, persist_dropped_bytes{0};  // staging full (when_full: drop)
  std::atomic<uint64_t> shared_copies{0}, shared_copies_skipped{0};
};

// Removes the files of replicas already taken out of the index (evicted, stale or bad); a file
// already gone is fine, other failures are logged. Loop thread (or before the loop starts).
void RemoveReplicaFiles(const Tiers& tiers, const std::vector<Victim>& victims);

}  // namespace kvstream
