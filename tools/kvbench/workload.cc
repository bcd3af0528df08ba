#include "workload.h"

#include <cmath>
#include <list>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "trace.h"

namespace kvbench {

std::string RankKey(const std::string& id, uint32_t rank) { return absl::StrCat(id, "@", rank); }

void PrefixKeys(Workload* workload, const std::string& prefix) {
  if (prefix.empty()) return;
  const auto add = [&](std::vector<std::string>& ids) {
    for (std::string& id : ids) id = prefix + id;
  };
  for (BenchStep& step : workload->steps) {
    add(step.reads);
    add(step.writes);
  }
  add(workload->populate);
  workload->description = absl::StrCat(workload->description, ", keys ", prefix, "...");
}

absl::StatusOr<Workload> Synthetic(const SyntheticOptions& o) {
  if (o.steps == 0 || o.requests == 0 || o.chunks == 0 || o.chunk_bytes == 0) {
    return absl::InvalidArgumentError("synthetic: steps, requests, chunks and chunk size must be > 0");
  }
  if (!(o.hit_ratio >= 0 && o.hit_ratio <= 1)) return absl::InvalidArgumentError("--hit-ratio must be in [0, 1]");
  Workload w;
  w.chunk_bytes = o.chunk_bytes;
  const uint32_t hits = static_cast<uint32_t>(std::lround(o.hit_ratio * o.chunks));
  for (uint32_t s = 0; s < o.steps; ++s) {
    BenchStep step;
    for (uint32_t r = 0; r < o.requests; ++r) {
      for (uint32_t c = 0; c < o.chunks; ++c) {
        std::string id = absl::StrCat("syn/s", s, "/r", r, "/c", c);
        (c < hits ? step.reads : step.writes).push_back(std::move(id));
      }
    }
    w.populate.insert(w.populate.end(), step.reads.begin(), step.reads.end());
    w.steps.push_back(std::move(step));
  }
  w.description = absl::StrCat("synthetic: ", o.steps, " steps x ", o.requests, " requests x ", o.chunks,
                               " chunks (", hits, " stored, ", o.chunks - hits, " new)");
  return w;
}

namespace {

// LRU set of chunk ids with a capacity in chunks.
class HostCache {
 public:
  explicit HostCache(uint64_t capacity) : capacity_(capacity) {}
  // True if `id` was cached; either way it is now the most recently used.
  bool Touch(uint64_t id) {
    auto it = where_.find(id);
    const bool hit = it != where_.end();
    if (hit) order_.erase(it->second);
    order_.push_front(id);
    where_[id] = order_.begin();
    while (order_.size() > capacity_) {
      where_.erase(order_.back());
      order_.pop_back();
    }
    return hit;
  }

 private:
  uint64_t capacity_;
  std::list<uint64_t> order_;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace

absl::StatusOr<Workload> FromTrace(const TraceOptions& o) {
  if (o.chunk_tokens == 0 || o.chunk_tokens % kvsim::kTraceBlockTokens != 0) {
    return absl::InvalidArgumentError("--chunk-tokens must be a positive multiple of 512 (the trace's block)");
  }
  if (o.ranks == 0 || o.batch == 0 || o.kv_bytes_per_token == 0) {
    return absl::InvalidArgumentError("trace: ranks, batch and KV bytes per token must be > 0");
  }
  const uint64_t node_chunk = o.chunk_tokens * o.kv_bytes_per_token;
  if (node_chunk % o.ranks != 0) return absl::InvalidArgumentError("a chunk's bytes must divide evenly among the ranks");
  auto trace = kvsim::LoadTrace(o.path);
  if (!trace.ok()) return trace.status();
  Workload w;
  w.chunk_bytes = node_chunk / o.ranks;
  const uint32_t blocks_per_chunk = o.chunk_tokens / kvsim::kTraceBlockTokens;
  HostCache host(o.host_cache_bytes / node_chunk);
  std::unordered_set<uint64_t> seen;
  std::set<std::string> populate;
  BenchStep step;
  uint32_t in_step = 0, used = 0;
  for (size_t i = 0; i < trace->size() && used < o.requests && w.steps.size() < o.max_steps; ++i) {
    const kvsim::Request& req = (*trace)[i];
    const bool measured = i >= o.warmup;
    const size_t chunks = std::min<size_t>(req.input_tokens / o.chunk_tokens, req.blocks.size() / blocks_per_chunk);
    for (size_t c = 0; c < chunks; ++c) {
      const uint64_t id = req.blocks[(c + 1) * blocks_per_chunk - 1];
      const bool cached = host.Touch(id);
      const bool stored = seen.count(id) > 0;
      seen.insert(id);
      if (!measured) continue;
      const std::string key = absl::StrCat("trace/", id, "x", blocks_per_chunk);
      if (cached) {
        ++w.host_hits;
      } else if (stored) {
        ++w.storage_hits;
        step.reads.push_back(key);
        populate.insert(key);
      } else {
        ++w.new_chunks;
        step.writes.push_back(key);
      }
    }
    if (!measured) continue;
    ++used;
    if (++in_step == o.batch) {
      if (!step.reads.empty()) w.steps.push_back(std::move(step));
      step = {};
      in_step = 0;
    }
  }
  if (!step.reads.empty() && w.steps.size() < o.max_steps) w.steps.push_back(std::move(step));
  if (w.steps.empty()) return absl::FailedPreconditionError("the trace window has no storage reads (smaller host cache?)");
  w.populate.assign(populate.begin(), populate.end());
  w.description = absl::StrCat("trace ", o.path, ": requests ", o.warmup, "..", o.warmup + used, ", ", o.batch,
                               " per step, ", o.chunk_tokens, "-token chunks of ", node_chunk >> 20, " MiB, host cache ",
                               o.host_cache_bytes >> 20, " MiB: ", w.host_hits, " host hits, ", w.storage_hits,
                               " storage reads, ", w.new_chunks, " new chunks");
  return w;
}

}  // namespace kvbench
