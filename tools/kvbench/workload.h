// kvbench's workloads: the chunks each measured step reads from storage and the new chunks it
// writes, per node (every tensor-parallel rank reads and writes its own part of each chunk).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvbench {

struct BenchStep {
  std::vector<std::string> reads;   // chunk ids stored before the step (storage hits)
  std::vector<std::string> writes;  // new chunk ids the step produces (persisted during it)
};

struct Workload {
  std::string description;
  uint64_t chunk_bytes = 0;           // bytes of one chunk on one rank
  std::vector<BenchStep> steps;
  std::vector<std::string> populate;  // every chunk any step reads, stored before measuring
  // Trace only: how the requests split between the host cache, storage and new KV (in chunks).
  uint64_t host_hits = 0, storage_hits = 0, new_chunks = 0;
};

// Rank r's part of chunk `id`: its key in kvstreamd.
std::string RankKey(const std::string& id, uint32_t rank);

// Puts `prefix` in front of every chunk id of the workload (steps and populate), so that several
// benches on one shared tier read keys of their own, or the same keys on purpose (--key-prefix).
void PrefixKeys(Workload* workload, const std::string& prefix);

// `steps` steps of `requests` requests x `chunks` chunks; the first round(hit_ratio x chunks) of
// each request are stored (read), the rest are new (written).
struct SyntheticOptions {
  uint32_t steps = 6, requests = 4, chunks = 8;
  double hit_ratio = 1.0;
  uint64_t chunk_bytes = 8ull << 20;
};
absl::StatusOr<Workload> Synthetic(const SyntheticOptions& o);

// A Mooncake-format request trace (docs/design.md section 6) in arrival order, `batch` requests per
// step. A chunk is chunk_tokens (a multiple of 512) of a request's prefix; its id is its last
// prefix block's hash id. A host-memory LRU of host_cache_bytes sits in front: a chunk it holds
// is a host hit, a chunk seen before but evicted from it is read from storage, an unseen one is
// new KV. The first `warmup` requests only warm the cache; then up to `requests` requests and
// `max_steps` steps with storage reads are kept (steps without any are skipped).
struct TraceOptions {
  std::string path;
  uint64_t kv_bytes_per_token = 16384;
  uint32_t chunk_tokens = 512;
  uint64_t host_cache_bytes = 4ull << 30;
  uint32_t batch = 8, warmup = 1000, requests = 2000, max_steps = 20, ranks = 1;
};
absl::StatusOr<Workload> FromTrace(const TraceOptions& o);

}  // namespace kvbench
