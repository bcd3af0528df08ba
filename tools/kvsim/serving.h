// A continuous-batching serving node in front of KVStream: requests are admitted in arrival order
// (never reordered for the cache), each step spends a token budget on decodes and chunked
// prefills, and a step takes T_ret + T_fwd + T_wr (docs/design.md section 1).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/load_model.h"
#include "trace.h"

namespace kvsim {

struct ModelProfile {
  std::string name;
  double kv_bytes_per_token = 0;     // all layers, all KV heads, the whole model (all TP ranks)
  uint32_t tp = 8;
  double step_base_s = 0;            // fixed cost of a forward step
  double prefill_s_per_token = 0;    // the weights' part of prefill (2 x params flops per token)
  double decode_s_per_sequence = 0;
  // The shape (for the attention term of prefill, PrefillSeconds).
  double params = 0;                 // parameters
  uint32_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
// 8B (Llama-3-8B, 128 KiB per token), and the paper's models (Table 3): 14B, 32B, 70B, 110B with
// 160, 256, 320, 320 KB per token. Shapes and sources: the table in serving.cc.
absl::StatusOr<ModelProfile> FindProfile(const std::string& name);
std::vector<std::string> ProfileNames();

// Seconds to prefill `tokens` new tokens of one sequence after `context` tokens whose KV is
// already there (loaded or computed), at the profile's rate:
//   flops = 2 params tokens                                      (the weights; = tokens x prefill_s_per_token)
//         + 4 layers heads head_dim (tokens context + tokens (tokens + 1) / 2)   (attention: QK^T and
//           AV, 2 flops per multiply-add, for every causal pair of a new token and a token before
//           it or itself)
// The attention flops run at the rate the weights' part implies (2 params / prefill_s_per_token).
// Without `attention`, the weights' part alone (kvsim before the attention term).
double PrefillSeconds(const ModelProfile& p, double tokens, double context, bool attention = true);

enum class PolicyKind { kRecompute, kSerial, kFastest, kStatic, kCompletion, kVerdict };

struct Policy {
  PolicyKind kind = PolicyKind::kCompletion;
  double g = 0.5;  // kStatic
  std::string label() const;
};
// "recompute" | "serial" | "fastest" | "static:<g>" | "completion" | "verdict"
// verdict: completion routing, and for each request a load-or-recompute cut of its storage hit
// (ChooseCut); new KV that staging cannot take is dropped (and counted), never waited for.
absl::StatusOr<Policy> ParsePolicy(const std::string& text);

// Where new KV is written (M3), and which chunks the other tiers hold.
//   all: every tier, through staging (a saturated slow tier back-pressures the step);
//   primary: tier 0 only (every read then comes from it);
//   fraction:<f>: every tier for a fixed share f of the new blocks, tier 0 only for the rest;
//   idle: tier 0 through staging; the other tiers' copies (secondaries) wait in a queue written
//     only from those tiers' write bandwidth, and the oldest are dropped when the queue outgrows
//     staging, so a secondary never stalls a step;
//   reuse: tier 0 only for new KV; a block read back from tier 0 alone is copied to the others
//     while in memory (no extra read), through the same never-stalling queue;
//   adaptive: idle and reuse together.
enum class ReplicationKind { kAll, kPrimary, kFraction, kIdle, kReuse, kAdaptive };

struct Replication {
  ReplicationKind kind = ReplicationKind::kAll;
  double fraction = 1;  // kFraction
  std::string label() const;
  bool single_tier() const { return kind == ReplicationKind::kPrimary; }
  bool secondaries_from_idle() const { return kind == ReplicationKind::kIdle || kind == ReplicationKind::kAdaptive; }
  bool secondaries_on_reuse() const { return kind == ReplicationKind::kReuse || kind == ReplicationKind::kAdaptive; }
};
// "all" | "primary" | "fraction:<f>" | "idle" | "reuse" | "adaptive"
absl::StatusOr<Replication> ParseReplication(const std::string& text);

// Per-step read bandwidth of each tier: step index and start time -> bytes/s per tier.
using BandwidthSchedule = std::function<std::vector<double>(uint64_t step, double now_s)>;

struct NodeConfig {
  ModelProfile profile;
  double memory_bytes = 0;          // GPU + host KV capacity (LRU) in front of storage
  BandwidthSchedule bandwidth;      // read bandwidth per tier
  std::vector<double> write_bandwidth;  // write bytes/s per tier; empty: as fast as it reads
  Replication replication;          // where new KV goes (all by default)
  uint32_t token_budget = 8192;     // tokens per step (decodes + prefill chunks)
  uint32_t max_running = 256;       // requests admitted at once
  double block_bytes = 1 << 20;     // router block
  uint32_t queue_depth = 2;         // blocks in flight per tier
  uint32_t chunk_tokens = 256;      // serial policy: one read per chunk of this many tokens
  double chunk_latency_s = 200e-6;  // serial policy: per-read latency
  double staging_bytes = 32.0 * (1ull << 30);  // deferred writes beyond this back-pressure the step
  uint32_t write_depth = 2;         // write pieces (blocks) in flight per tier when reads start
  std::vector<double> slo_s = {1, 2, 5};
  bool attention = true;            // prefill pays the attention term (PrefillSeconds)
  // Loads overlap forward passes (an engine loading KV asynchronously: vLLM's KV connector,
  // SGLang's prefetch): a request's load is issued when it is admitted, storage serves loads in
  // admission order at the policy's speed, and the request joins the batch at the first step
  // after its load landed; meanwhile the other requests' steps run (T_ret is then no part of a
  // step). Off: the load is a step's T_ret, before its forward pass (section 1's model).
  bool overlap = false;
};

struct PolicyResult {
  std::string policy;
  uint64_t requests = 0;
  uint64_t steps = 0;
  double makespan_s = 0;
  double throughput_rps = 0;
  double throughput_tokens_per_s = 0;  // prompt + output tokens
  double ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  std::vector<double> slo_attainment;  // per deadline in NodeConfig::slo_s
  double retrieval_s = 0;              // sum of T_ret
  double bound_s = 0;                  // sum of D_i / sum_k b_k(i)
  double gap = 0;                      // retrieval_s / bound_s - 1
  double forward_s = 0;
  double write_stall_s = 0;            // back-pressure of deferred writes
  std::vector<double> bytes_read;      // per tier
  std::vector<double> bytes_written;   // per tier
  double secondary_dropped_bytes = 0;  // secondaries dropped before they were written (idle, reuse)
  double write_dropped_bytes = 0;      // verdict: new KV copies staging could not take, not written
  uint64_t memory_hit_blocks = 0, storage_hit_blocks = 0, computed_blocks = 0;
  uint64_t hit_blocks_computed = 0;    // verdict: stored blocks past the cut, computed instead of read
  std::vector<double> ttft;            // per request, in admission order
};

// Write bytes/s per tier: node.write_bandwidth where given, else the tier's read bandwidth.
std::vector<double> WriteBandwidth(const NodeConfig& node, const std::vector<double>& read_bw);

PolicyResult Simulate(const std::vector<Request>& trace, const NodeConfig& node, const Policy& policy);

// The arrival-rate scale at which `trace` offers `load` of the node's compute: its requests'
// recompute work (every prompt prefilled in full, PrefillSeconds plus its share of step bases;
// decodes not counted) over its arrival span divided by the rate equals `load`.
double OfferedLoadRate(const std::vector<Request>& trace, const NodeConfig& node, double load);

// The verdict of one request (docs/design-notes.md, "Load or recompute in kvsim"): its cached
// prefix, block by block (trace blocks of kTraceBlockTokens), is in memory (bytes 0) or on
// storage (`bytes` held by the tiers of `holders`). Loading the first h blocks takes L(h), the
// daemon's estimate (kvstream::LoadModel over `tiers`: each tier's read bandwidth and delay,
// cumulative as blocks are added); computing the rest takes R(h) = PrefillSeconds(n - h', h') +
// (n - h') / token_budget x step_base, h' = the tokens of h blocks (at most n - 1: the last token is
// always computed). The verdict is the h in 0..blocks minimising
//   overlap:    max(L(h), compute_ahead_s) + R(h)   (the load runs while the prefill work ahead
//               of the request does; either way its own prefill starts after both)
//   sequential: L(h) - queued_s + R(h) for h with reads, R(0) otherwise (the reads queued ahead,
//               queued_s, are in earlier steps whatever this request does)
struct HitBlock {
  double bytes = 0;      // to read from storage; 0: in memory
  uint32_t holders = 0;  // bit k: tier k holds it
};
struct Cut {
  uint32_t blocks = 0;  // h: the blocks loaded (or taken from memory); the rest are computed
  double load_s = 0;    // L(h)
  double recompute_s = 0;  // R(h)
  double cost_s = 0;    // what was minimised
};
// node gives the profile, the token budget, attention and overlap.
Cut ChooseCut(const NodeConfig& node, const std::vector<kvstream::TierRate>& tiers, const std::vector<HitBlock>& prefix,
              uint32_t input_tokens, double compute_ahead_s, double queued_s);

// Retrieval time of `only0` bytes that only tier 0 holds and `shared` bytes every tier holds,
// under `policy`; fills the bytes each tier read. With shared == everything, the policy's usual
// time; completion routing stays work-conserving among the holders (the other tiers take shared
// blocks only).
double PartialReplicaTime(const Policy& policy, const NodeConfig& node, double only0, double shared, uint64_t chunks,
                          const std::vector<double>& bw, const std::vector<double>& delay,
                          std::vector<double>* tier_bytes);

}  // namespace kvsim
