#include "serving.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <list>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "model.h"

namespace kvsim {
namespace {

// Forward-time assumptions per model; a profile is a model of the engine, to be replaced by
// measured values where they exist. The 14B-110B forward costs are for TP 8 on a node of
// H100-class GPUs, with the paper's KV bytes per token (Table 3: 160, 256, 320, 320 KB); their
// prefill rates imply 2.5-2.8 PFLOP/s for the weights (2 x params / prefill_s_per_token), a third
// of 8 H100s' dense bf16 peak. 8B runs on one GPU (TP 1) at the same third of its peak:
// 2 x 8.03e9 flops per token at ~0.32 PFLOP/s = 50 us; its step base is its weights read once
// (16 GB at 3.35 TB/s, ~5 ms) plus launch overhead, and a decode reads ~6k tokens of KV per
// sequence (~0.8 GB, ~0.2 ms).
// Shapes (layers, hidden, heads, KV heads, head dim), from each model's published config.json on
// Hugging Face; the 14B-110B models are ones whose KV per token matches the paper's figure
// (2 x layers x KV heads x head dim x 2 bytes):
//   8B   meta-llama/Meta-Llama-3-8B     32 x 4096, 32 heads, 8 KV x 128: 128 KiB/token (bf16), 8.03B params
//   14B  Qwen/Qwen3-14B                 40 x 5120, 40 heads, 8 KV x 128: 160 KiB, 14.8B
//   32B  Qwen/Qwen2.5-32B               64 x 5120, 40 heads, 8 KV x 128: 256 KiB, 32.5B
//   70B  meta-llama/Meta-Llama-3-70B    80 x 8192, 64 heads, 8 KV x 128: 320 KiB, 70.6B
//   110B Qwen/Qwen1.5-110B              80 x 8192, 64 heads, 8 KV x 128: 320 KiB, 111B
const std::vector<ModelProfile>& Profiles() {
  // name, KV bytes/token, TP, step base s, prefill s/token, decode s/sequence,
  // params, layers, hidden, heads, KV heads, head dim
  static const std::vector<ModelProfile> profiles = {
      {"8B", 131072, 1, 0.008, 50e-6, 200e-6, 8.03e9, 32, 4096, 32, 8, 128},
      {"14B", 160e3, 8, 0.012, 12e-6, 40e-6, 14.8e9, 40, 5120, 40, 8, 128},
      {"32B", 256e3, 8, 0.018, 25e-6, 60e-6, 32.5e9, 64, 5120, 40, 8, 128},
      {"70B", 320e3, 8, 0.025, 50e-6, 90e-6, 70.6e9, 80, 8192, 64, 8, 128},
      {"110B", 320e3, 8, 0.032, 80e-6, 120e-6, 111e9, 80, 8192, 64, 8, 128},
  };
  return profiles;
}

// An LRU set of block ids with a capacity in blocks.
class Lru {
 public:
  explicit Lru(uint64_t capacity) : capacity_(capacity) {}
  bool Contains(uint64_t id) const { return pos_.count(id) != 0; }
  void Touch(uint64_t id) {
    if (capacity_ == 0) return;
    auto it = pos_.find(id);
    if (it != pos_.end()) {
      order_.splice(order_.end(), order_, it->second);
      return;
    }
    order_.push_back(id);
    pos_[id] = std::prev(order_.end());
    if (order_.size() > capacity_) {
      pos_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  uint64_t capacity_;
  std::list<uint64_t> order_;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, std::floor(p * (v.size() - 1) + 0.5)));
  return v[i];
}

struct Active {
  size_t request;
  uint32_t prefill_left;  // tokens still to compute
  double read_bytes;      // storage bytes to retrieve before its first prefill chunk
  uint64_t read_chunks;
  uint32_t new_blocks;    // blocks whose KV it computes (written to storage): the last ones
  double shared_bytes = 0;  // of read_bytes, those every tier holds (the rest only tier 0)
  bool retrieved = false;
  uint32_t context = 0;     // tokens whose KV it has (loaded or computed so far): attention's context
  uint32_t first_new = 0;   // verdict: its blocks from here on are computed (and written if not stored)
  double ready_at = 0;      // overlap: when its load lands
};

// A block a verdict step may write: its position in its request's prefix decides its value.
struct WriteCandidate {
  uint32_t position;
  size_t request;  // index into the step's finished prefills
  uint64_t id;
};

// A copy for the tiers after the first, waiting for their idle write bandwidth (idle, reuse).
struct Secondary {
  uint64_t id;
  double left;  // bytes still to write
};

// The deterministic share of blocks `fraction:<f>` replicates.
bool InFraction(uint64_t id, double f) { return static_cast<double>((id * 0x9E3779B97F4A7C15ull) >> 11) < f * 0x1p53; }

}  // namespace

absl::StatusOr<ModelProfile> FindProfile(const std::string& name) {
  for (const ModelProfile& p : Profiles()) {
    if (p.name == name) return p;
  }
  return absl::NotFoundError("no model profile '" + name + "' (have 8B, 14B, 32B, 70B, 110B)");
}

double PrefillSeconds(const ModelProfile& p, double tokens, double context, bool attention) {
  if (!(tokens > 0)) return 0;
  const double weights = tokens * p.prefill_s_per_token;
  if (!attention || !(p.params > 0) || !(p.prefill_s_per_token > 0)) return weights;
  const double flops_per_s = 2 * p.params / p.prefill_s_per_token;
  const double pairs = tokens * context + tokens * (tokens + 1) / 2;
  return weights + 4.0 * p.layers * p.heads * p.head_dim * pairs / flops_per_s;
}

std::vector<std::string> ProfileNames() {
  std::vector<std::string> names;
  for (const ModelProfile& p : Profiles()) names.push_back(p.name);
  return names;
}

std::string Policy::label() const {
  switch (kind) {
    case PolicyKind::kRecompute: return "recompute";
    case PolicyKind::kSerial: return "serial";
    case PolicyKind::kFastest: return "fastest";
    case PolicyKind::kCompletion: return "completion";
    case PolicyKind::kVerdict: return "verdict";
    case PolicyKind::kStatic: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "static:%g", g);
      return buf;
    }
  }
  return "?";
}

absl::StatusOr<Policy> ParsePolicy(const std::string& text) {
  if (text == "recompute") return Policy{PolicyKind::kRecompute};
  if (text == "serial") return Policy{PolicyKind::kSerial};
  if (text == "fastest") return Policy{PolicyKind::kFastest};
  if (text == "completion") return Policy{PolicyKind::kCompletion};
  if (text == "verdict") return Policy{PolicyKind::kVerdict};
  double g;
  if (text.rfind("static:", 0) == 0 && absl::SimpleAtod(text.substr(7), &g) && g >= 0 && g <= 1) {
    return Policy{PolicyKind::kStatic, g};
  }
  return absl::InvalidArgumentError("policy '" + text + "' is not one of recompute, serial, fastest, static:<g>, completion, verdict");
}

std::string Replication::label() const {
  switch (kind) {
    case ReplicationKind::kAll: return "all";
    case ReplicationKind::kPrimary: return "primary";
    case ReplicationKind::kIdle: return "idle";
    case ReplicationKind::kReuse: return "reuse";
    case ReplicationKind::kAdaptive: return "adaptive";
    case ReplicationKind::kFraction: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "fraction:%g", fraction);
      return buf;
    }
  }
  return "?";
}

absl::StatusOr<Replication> ParseReplication(const std::string& text) {
  if (text == "all") return Replication{ReplicationKind::kAll};
  if (text == "primary") return Replication{ReplicationKind::kPrimary};
  if (text == "idle") return Replication{ReplicationKind::kIdle};
  if (text == "reuse") return Replication{ReplicationKind::kReuse};
  if (text == "adaptive") return Replication{ReplicationKind::kAdaptive};
  double f;
  if (text.rfind("fraction:", 0) == 0 && absl::SimpleAtod(text.substr(9), &f) && f >= 0 && f <= 1) {
    return Replication{ReplicationKind::kFraction, f};
  }
  return absl::InvalidArgumentError("replication '" + text +
                                    "' is not one of all, primary, fraction:<f>, idle, reuse, adaptive");
}

double PartialReplicaTime(const Policy& policy, const NodeConfig& node, double only0, double shared, uint64_t chunks,
                          const std::vector<double>& bw, const std::vector<double>& delay,
                          std::vector<double>* tier_bytes) {
  const double total = only0 + shared;
  std::vector<double>& split = *tier_bytes;
  split.assign(bw.size(), 0);
  switch (policy.kind) {
    case PolicyKind::kRecompute:
      return 0;
    case PolicyKind::kSerial:
      split[0] = total;
      return SerialTime(total, chunks, node.chunk_latency_s, bw[0], delay[0]);
    case PolicyKind::kFastest:
      split[0] = total;
      return FastestTime(total, bw[0], delay[0]);
    case PolicyKind::kStatic: {
      split[1] = std::min((1 - policy.g) * total, shared);  // tier 1 can only read what it holds
      split[0] = total - split[1];
      const double t0 = split[0] > 0 ? delay[0] + split[0] / bw[0] : 0;
      const double t1 = split[1] > 0 ? delay[1] + split[1] / bw[1] : 0;
      return std::max(t0, t1);
    }
    case PolicyKind::kCompletion:
    case PolicyKind::kVerdict: {
      const double t = CompletionTime(total, node.block_bytes, node.queue_depth, bw, delay, &split);
      double others = 0;
      for (size_t k = 1; k < split.size(); ++k) others += split[k];
      if (others <= shared) return t;
      // The other tiers run out of blocks they hold: they read all the shared ones at their
      // speed while tier 0 reads the rest.
      const std::vector<double> other_bw(bw.begin() + 1, bw.end()), other_delay(delay.begin() + 1, delay.end());
      for (size_t k = 1; k < split.size(); ++k) split[k] *= shared / others;
      split[0] = only0;
      return std::max(FastestTime(only0, bw[0], delay[0]), BoundTime(shared, other_bw, other_delay));
    }
  }
  return 0;
}

std::vector<double> WriteBandwidth(const NodeConfig& node, const std::vector<double>& read_bw) {
  if (node.write_bandwidth.empty()) return read_bw;
  std::vector<double> w = read_bw;
  for (size_t k = 0; k < w.size() && k < node.write_bandwidth.size(); ++k) w[k] = node.write_bandwidth[k];
  return w;
}

Cut ChooseCut(const NodeConfig& node, const std::vector<kvstream::TierRate>& tiers, const std::vector<HitBlock>& prefix,
              uint32_t input_tokens, double compute_ahead_s, double queued_s) {
  const double step_per_token = node.token_budget > 0 ? node.profile.step_base_s / node.token_budget : 0;
  auto recompute = [&](size_t h) {
    const double cached = std::min(static_cast<double>(h) * kTraceBlockTokens, input_tokens - 1.0);
    const double n = input_tokens - cached;
    return PrefillSeconds(node.profile, n, cached, node.attention) + n * step_per_token;
  };
  auto cost = [&](double load, double rest) {
    if (node.overlap) return std::max(load, compute_ahead_s) + rest;
    return (load > 0 ? load - queued_s : 0) + rest;
  };
  kvstream::LoadModel model(tiers);
  Cut best;
  best.recompute_s = recompute(0);
  best.cost_s = cost(0, best.recompute_s);
  double load = 0;
  for (size_t h = 1; h <= prefix.size(); ++h) {
    if (prefix[h - 1].bytes > 0) load = model.Add(prefix[h - 1].bytes, prefix[h - 1].holders);
    const double rest = recompute(h);
    const double c = cost(load, rest);
    if (c < best.cost_s) best = {static_cast<uint32_t>(h), load, rest, c};
  }
  return best;
}

double OfferedLoadRate(const std::vector<Request>& trace, const NodeConfig& node, double load) {
  if (trace.size() < 2 || !(load > 0)) return 1;
  const double step_per_token = node.token_budget > 0 ? node.profile.step_base_s / node.token_budget : 0;
  double work = 0;
  for (const Request& r : trace) {
    work += PrefillSeconds(node.profile, r.input_tokens, 0, node.attention) + r.input_tokens * step_per_token;
  }
  const double span = trace.back().arrival_s - trace.front().arrival_s;
  return span > 0 && work > 0 ? load * span / work : 1;
}

PolicyResult Simulate(const std::vector<Request>& trace, const NodeConfig& node, const Policy& policy) {
  const double block_kv = kTraceBlockTokens * node.profile.kv_bytes_per_token;
  const bool uses_storage = policy.kind != PolicyKind::kRecompute;
  const bool verdict = policy.kind == PolicyKind::kVerdict;
  const Replication& rep = node.replication;
  // A one-tier policy reads and writes tier 0 only (its other tiers would never be read), as does
  // primary replication.
  const bool single_tier =
      policy.kind == PolicyKind::kSerial || policy.kind == PolicyKind::kFastest || rep.single_tier();
  const size_t tiers = node.bandwidth(0, 0).size();
  const uint32_t every_tier = tiers >= 32 ? ~0u : (1u << tiers) - 1;
  const double step_per_token = node.token_budget > 0 ? node.profile.step_base_s / node.token_budget : 0;
  PolicyResult out;
  out.policy = policy.label();
  out.bytes_read.assign(tiers, 0);
  out.bytes_written.assign(tiers, 0);
  out.ttft.assign(trace.size(), 0);
  Lru memory(static_cast<uint64_t>(node.memory_bytes / block_kv));
  std::unordered_set<uint64_t> stored;      // blocks written to tier 0 (and on every tier under all)
  std::unordered_set<uint64_t> replicated;  // blocks every tier holds
  std::vector<double> backlog(tiers, 0);    // deferred write bytes still queued per tier
  std::deque<Secondary> secondaries;        // idle, reuse: copies for the other tiers, oldest first
  std::unordered_set<uint64_t> queued;      // ids in `secondaries`
  double secondary_bytes = 0;
  double read_free_at = 0;                  // overlap: when storage has read every load issued so far
  // Secondaries are written only with the other tiers' write bandwidth (the slowest of them) over
  // `seconds`, and the oldest dropped when they outgrow what staging has left beside tier 0's.
  auto drain_secondaries = [&](const std::vector<double>& wbw, double seconds) {
    double budget = seconds * *std::min_element(wbw.begin() + 1, wbw.end());
    while (budget > 0 && !secondaries.empty()) {
      Secondary& front = secondaries.front();
      const double take = std::min(front.left, budget);
      front.left -= take;
      budget -= take;
      secondary_bytes -= take;
      for (size_t k = 1; k < tiers; ++k) out.bytes_written[k] += take;
      if (front.left > 0) break;
      replicated.insert(front.id);
      queued.erase(front.id);
      secondaries.pop_front();
    }
    while (!secondaries.empty() && secondary_bytes > std::max(0.0, node.staging_bytes - backlog[0])) {
      out.secondary_dropped_bytes += secondaries.front().left;
      secondary_bytes -= secondaries.front().left;
      queued.erase(secondaries.front().id);
      secondaries.pop_front();
    }
  };
  // Written to every tier through staging (all, a fraction's share), not just tier 0.
  auto everywhere = [&](uint64_t id) {
    return !single_tier && (rep.kind == ReplicationKind::kAll ||
                            (rep.kind == ReplicationKind::kFraction && InFraction(id, rep.fraction)));
  };
  auto add_secondary = [&](uint64_t id) {
    if (single_tier || tiers < 2 || replicated.count(id) || !queued.insert(id).second) return;
    secondaries.push_back({id, block_kv});
    secondary_bytes += block_kv;
  };
  // Deferred writes are not issued during reads, but the pieces already in flight when reads start
  // (at most write_depth blocks per tier) delay that tier: their bytes, and the seconds they take.
  auto write_pieces = [&](const std::vector<double>& wbw, std::vector<double>* in_flight, std::vector<double>* delay) {
    in_flight->assign(tiers, 0);
    delay->assign(tiers, 0);
    for (size_t k = 0; k < tiers; ++k) {
      (*in_flight)[k] = std::min(backlog[k], node.write_depth * node.block_bytes);
      (*delay)[k] = wbw[k] > 0 ? (*in_flight)[k] / wbw[k] : 0;
    }
  };
  // What this request's own prefill costs (its chunks' weights, attention and step share).
  auto remaining_s = [&](const Active& a) {
    return PrefillSeconds(node.profile, a.prefill_left, a.context, node.attention) + a.prefill_left * step_per_token;
  };

  std::deque<Active> prefilling;
  struct Decoding { size_t request; uint32_t left; };
  std::vector<Decoding> decoding;
  size_t next = 0;
  double now = 0;
  uint64_t step = 0;
  auto ready = [&](const Active& a) { return !node.overlap || a.ready_at <= now; };
  while (next < trace.size() || !prefilling.empty() || !decoding.empty()) {
    if (decoding.empty() && std::none_of(prefilling.begin(), prefilling.end(), ready)) {
      // Nothing to compute until the next arrival (or, with overlap, a load landing): staged
      // writes drain meanwhile, once the tiers have read what was issued.
      double wake = INFINITY;
      if (next < trace.size() && prefilling.size() < node.max_running) wake = trace[next].arrival_s;
      for (const Active& a : prefilling) wake = std::min(wake, a.ready_at);
      if (wake > now) {
        const std::vector<double> idle_bw = WriteBandwidth(node, node.bandwidth(step, now));
        const double idle = std::max(0.0, wake - std::max(now, read_free_at));
        for (size_t k = 0; k < tiers; ++k) backlog[k] = std::max(0.0, backlog[k] - idle_bw[k] * idle);
        if (tiers > 1) drain_secondaries(idle_bw, idle);
        now = wake;
      }
    }
    // Admission in arrival order; the cache state is looked up when a request is admitted.
    while (next < trace.size() && trace[next].arrival_s <= now &&
           prefilling.size() + decoding.size() < node.max_running) {
      const Request& r = trace[next];
      Active a{next, 0, 0, 0, 0};
      uint32_t cached_blocks = 0;
      // A hit block, accounted: from memory, or read from storage.
      auto take_hit = [&](uint64_t id) {
        if (memory.Contains(id)) {
          ++out.memory_hit_blocks;
          return;
        }
        ++out.storage_hit_blocks;
        a.read_bytes += block_kv;
        if (!single_tier && replicated.count(id)) {
          a.shared_bytes += block_kv;
        } else if (rep.secondaries_on_reuse()) {
          add_secondary(id);  // read back from tier 0: copied to the others from memory
        }
      };
      if (!verdict) {
        for (uint64_t id : r.blocks) {
          if (!memory.Contains(id) && !(uses_storage && stored.count(id))) break;  // prefix semantics: the rest is computed
          take_hit(id);
          ++cached_blocks;
        }
      } else {
        // The verdict: the cut of the cached prefix that gets this request's first token soonest.
        std::vector<HitBlock> prefix;
        for (uint64_t id : r.blocks) {
          if (memory.Contains(id)) {
            prefix.push_back({0, 0});
          } else if (stored.count(id)) {
            prefix.push_back({block_kv, !single_tier && replicated.count(id) ? every_tier : 1u});
          } else {
            break;
          }
        }
        const std::vector<double> bw = node.bandwidth(step, now);
        std::vector<double> in_flight, delay;
        write_pieces(WriteBandwidth(node, bw), &in_flight, &delay);
        std::vector<kvstream::TierRate> rates(tiers);
        for (size_t k = 0; k < tiers; ++k) rates[k] = {bw[k], delay[k]};
        double compute_ahead = 0, queued_s = 0;
        if (node.overlap) {
          // Storage is busy with the loads issued before: every tier starts on this one then.
          if (read_free_at > now) {
            for (auto& t : rates) t.delay_s = read_free_at - now;
          }
          for (const Active& ahead : prefilling) compute_ahead += remaining_s(ahead);
        } else {
          // The reads of the requests admitted and not yet retrieved come first.
          kvstream::LoadModel ahead(rates);
          for (const Active& q : prefilling) {
            if (q.retrieved) continue;
            ahead.Add(q.read_bytes - q.shared_bytes, 1u);
            ahead.Add(q.shared_bytes, every_tier);
          }
          queued_s = ahead.seconds();
          for (auto& t : rates) t.delay_s = std::max(t.delay_s, queued_s);
        }
        const Cut cut = ChooseCut(node, rates, prefix, r.input_tokens, compute_ahead, queued_s);
        for (uint32_t i = 0; i < cut.blocks; ++i) take_hit(r.blocks[i]);
        for (size_t i = cut.blocks; i < prefix.size(); ++i) out.hit_blocks_computed += prefix[i].bytes > 0 ? 1 : 0;
        cached_blocks = cut.blocks;
        a.first_new = cut.blocks;
      }
      const uint32_t cached_tokens = std::min<uint32_t>(cached_blocks * kTraceBlockTokens, r.input_tokens - 1);
      a.prefill_left = r.input_tokens - cached_tokens;
      a.context = cached_tokens;
      a.new_blocks = static_cast<uint32_t>(r.blocks.size()) - cached_blocks;
      out.computed_blocks += a.new_blocks;
      a.read_chunks = static_cast<uint64_t>(std::ceil(a.read_bytes / (node.chunk_tokens * node.profile.kv_bytes_per_token)));
      for (uint64_t id : r.blocks) memory.Touch(id);
      if (node.overlap && a.read_bytes > 0) {
        // Issued now; storage serves loads one after another, each at the policy's speed.
        const std::vector<double> bw = node.bandwidth(step, now);
        std::vector<double> in_flight, delay, tier_bytes;
        write_pieces(WriteBandwidth(node, bw), &in_flight, &delay);
        const bool idle = read_free_at <= now;
        if (!idle) delay.assign(tiers, 0);
        const double t = PartialReplicaTime(policy, node, a.read_bytes - a.shared_bytes, a.shared_bytes, a.read_chunks,
                                            bw, delay, &tier_bytes);
        if (idle) {
          for (size_t k = 0; k < tiers; ++k) backlog[k] -= in_flight[k];  // written before the reads
        }
        a.ready_at = std::max(now, read_free_at) + t;
        read_free_at = a.ready_at;
        a.retrieved = true;
        for (size_t k = 0; k < tiers; ++k) out.bytes_read[k] += tier_bytes[k];
        out.retrieval_s += t;
        out.bound_s += BoundTime(a.read_bytes, bw);
      }
      prefilling.push_back(a);
      ++next;
    }
    if (decoding.empty() && std::none_of(prefilling.begin(), prefilling.end(), ready)) continue;  // loads pending
    // Compose the step: every decoding request gets one token, prefills share the rest.
    uint32_t budget = node.token_budget > decoding.size() ? node.token_budget - static_cast<uint32_t>(decoding.size()) : 0;
    double read_bytes = 0, shared_bytes = 0, attention_s = 0;
    std::vector<uint64_t> new_ids;  // blocks computed by the prefills that finish this step
    std::vector<WriteCandidate> candidates;  // verdict: the same, with their positions
    std::unordered_set<uint64_t> candidate_ids;
    uint64_t read_chunks = 0, prefill_tokens = 0;
    std::vector<size_t> finished_prefill;
    for (size_t i = 0; i < prefilling.size() && budget > 0; ++i) {
      Active& a = prefilling[i];
      if (!ready(a)) continue;  // overlap: its load has not landed; the others go ahead
      if (!a.retrieved) {
        a.retrieved = true;
        read_bytes += a.read_bytes;
        shared_bytes += a.shared_bytes;
        read_chunks += a.read_chunks;
      }
      const uint32_t take = std::min(budget, a.prefill_left);
      a.prefill_left -= take;
      budget -= take;
      prefill_tokens += take;
      if (node.attention) attention_s += PrefillSeconds(node.profile, take, a.context) - take * node.profile.prefill_s_per_token;
      a.context += take;
      if (a.prefill_left == 0) {
        finished_prefill.push_back(i);
        const std::vector<uint64_t>& blocks = trace[a.request].blocks;
        if (!verdict) {
          new_ids.insert(new_ids.end(), blocks.end() - a.new_blocks, blocks.end());
        } else {
          for (uint32_t p = a.first_new; p < blocks.size(); ++p) {
            if (!stored.count(blocks[p]) && candidate_ids.insert(blocks[p]).second) {
              candidates.push_back({p, finished_prefill.size() - 1, blocks[p]});
            }
          }
        }
      }
    }
    // T_ret under the policy (without overlap: the loads were issued at admission otherwise).
    std::vector<double> bw = node.bandwidth(step, now);
    const std::vector<double> wbw = WriteBandwidth(node, bw);
    double t_ret = 0;
    if (read_bytes > 0) {
      std::vector<double> in_flight, delay, tier_bytes;
      write_pieces(wbw, &in_flight, &delay);
      t_ret = PartialReplicaTime(policy, node, read_bytes - shared_bytes, shared_bytes, read_chunks, bw, delay,
                                 &tier_bytes);
      for (size_t k = 0; k < tiers; ++k) out.bytes_read[k] += tier_bytes[k];
      out.retrieval_s += t_ret;
      out.bound_s += BoundTime(read_bytes, bw);
      for (size_t k = 0; k < tiers; ++k) backlog[k] -= in_flight[k];  // written before the reads
    }
    const double t_fwd = node.profile.step_base_s + prefill_tokens * node.profile.prefill_s_per_token +
                         decoding.size() * node.profile.decode_s_per_sequence + attention_s;
    // The tiers write while they read nothing: during the forward pass, or with overlap, the part
    // of the step after the loads issued so far.
    const double write_window =
        node.overlap ? std::max(0.0, now + t_ret + t_fwd - std::max(now, read_free_at)) : t_fwd;
    // Deferred writes (M2, M3): new KV is staged for every tier it is replicated to and written
    // while the tiers do not read; what does not fit stays staged for the next idle period, and past
    // the staging limit the engine waits for it (back-pressure, T_wr). Under the verdict, new
    // blocks are admitted to staging by value instead, earlier prefix positions first, while they
    // fit (a block past one that did not fit is worthless to its request), and the rest dropped.
    double t_wr = 0;
    if (uses_storage && !verdict) {
      for (uint64_t id : new_ids) {
        // Tier 0 always; the others through staging or as a secondary.
        for (size_t k = 0; k < (everywhere(id) ? tiers : 1); ++k) {
          backlog[k] += block_kv;
          out.bytes_written[k] += block_kv;
        }
        if (rep.secondaries_from_idle()) add_secondary(id);
      }
    } else if (verdict) {
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const WriteCandidate& x, const WriteCandidate& y) { return x.position < y.position; });
      std::vector<bool> cut_off(finished_prefill.size(), false);
      auto fits = [&](size_t k) { return backlog[k] + block_kv - wbw[k] * write_window <= node.staging_bytes; };
      for (const WriteCandidate& c : candidates) {
        const size_t copies = everywhere(c.id) ? tiers : 1;
        if (cut_off[c.request] || !fits(0)) {  // tier 0 holds every stored block: no room, no block
          cut_off[c.request] = true;
          out.write_dropped_bytes += copies * block_kv;
          continue;
        }
        bool every_copy = copies == tiers;
        for (size_t k = 0; k < copies; ++k) {
          if (k > 0 && !fits(k)) {  // the copy is dropped; tier 0's is kept
            every_copy = false;
            out.write_dropped_bytes += block_kv;
            continue;
          }
          backlog[k] += block_kv;
          out.bytes_written[k] += block_kv;
        }
        stored.insert(c.id);
        if (every_copy && copies > 1) replicated.insert(c.id);
        if (rep.secondaries_from_idle()) add_secondary(c.id);
      }
    }
    for (size_t k = 0; k < tiers; ++k) {
      backlog[k] = std::max(0.0, backlog[k] - wbw[k] * write_window);
      if (!verdict && backlog[k] > node.staging_bytes) {  // staging full: the engine waits for the writes
        t_wr = std::max(t_wr, (backlog[k] - node.staging_bytes) / wbw[k]);
      }
    }
    for (size_t k = 0; k < tiers; ++k) backlog[k] = std::max(0.0, std::min(backlog[k] - wbw[k] * t_wr, node.staging_bytes));
    if (tiers > 1) drain_secondaries(wbw, write_window + t_wr);
    // With overlap, the tiers write through a stall, so the loads still to read wait for it.
    if (node.overlap && t_wr > 0 && read_free_at > now + t_fwd) read_free_at += t_wr;
    const double t_step = t_ret + t_fwd + t_wr;
    now += t_step;
    out.forward_s += t_fwd;
    out.write_stall_s += t_wr;
    ++step;
    // Decodes of this step, then the requests whose prefill just produced their first token.
    for (Decoding& d : decoding) --d.left;
    std::erase_if(decoding, [](const Decoding& d) { return d.left == 0; });
    // Blocks computed this step count as on storage from now on (the model ignores the window
    // between staging and durability); under the verdict, those staging took.
    for (auto it = finished_prefill.rbegin(); it != finished_prefill.rend(); ++it) {
      const Active& a = prefilling[*it];
      const Request& r = trace[a.request];
      if (uses_storage && !verdict) {
        for (uint64_t id : r.blocks) {
          stored.insert(id);
          if (everywhere(id)) replicated.insert(id);
        }
      }
      out.ttft[a.request] = now - r.arrival_s;
      if (r.output_tokens > 1) decoding.push_back({a.request, r.output_tokens - 1});
      prefilling.erase(prefilling.begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
  out.requests = trace.size();
  out.steps = step;
  out.makespan_s = now - (trace.empty() ? 0 : trace.front().arrival_s);
  double tokens = 0;
  for (const Request& r : trace) tokens += r.input_tokens + r.output_tokens;
  out.throughput_rps = out.makespan_s > 0 ? trace.size() / out.makespan_s : 0;
  out.throughput_tokens_per_s = out.makespan_s > 0 ? tokens / out.makespan_s : 0;
  out.ttft_mean = out.ttft.empty() ? 0 : std::accumulate(out.ttft.begin(), out.ttft.end(), 0.0) / out.ttft.size();
  out.ttft_p50 = Percentile(out.ttft, 0.5);
  out.ttft_p90 = Percentile(out.ttft, 0.9);
  out.ttft_p99 = Percentile(out.ttft, 0.99);
  for (double slo : node.slo_s) {
    const double met = std::count_if(out.ttft.begin(), out.ttft.end(), [&](double t) { return t <= slo; });
    out.slo_attainment.push_back(out.ttft.empty() ? 0 : met / out.ttft.size());
  }
  out.gap = out.bound_s > 0 ? out.retrieval_s / out.bound_s - 1 : 0;
  return out;
}

}  // namespace kvsim
