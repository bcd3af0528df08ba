// kvsim's model against the worked examples of docs/design.md section 2, reuse distances computed by
// hand, and the serving queue's prediction that faster retrieval matters more under load.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "model.h"
#include "reuse.h"
#include "serving.h"

namespace kvsim {
namespace {

TEST_CASE("kvsim: a 75-25 split meets the bound at 3+1 and is 12.5 percent slower at 2+1") {
  const double d = 12e9;
  CHECK(StaticTime(d, 0.75, 3e9, 1e9) == Approx(BoundTime(d, {3e9, 1e9})));
  CHECK(StaticPenalty(0.75, 3e9, 1e9) == Approx(0).margin(1e-12));
  CHECK(StaticTime(d, 0.75, 2e9, 1e9) / BoundTime(d, {2e9, 1e9}) - 1 == Approx(0.125));
  CHECK(StaticPenalty(0.75, 2e9, 1e9) == Approx(0.125));
  // At 3 + 0.5 GB/s the split is slower than tier 0 alone.
  CHECK(StaticTime(d, 0.75, 3e9, 0.5e9) > FastestTime(d, 3e9));
}

TEST_CASE("kvsim: the static penalty is V-shaped in g with its minimum at phi") {
  const double b0 = 2e9, b1 = 1e9, phi = b0 / (b0 + b1);
  CHECK(StaticPenalty(phi, b0, b1) == Approx(0).margin(1e-12));
  double prev = INFINITY;
  for (double g = 0; g < phi - 1e-9; g += 0.05) {
    const double p = StaticPenalty(g, b0, b1);
    CHECK(p < prev);
    prev = p;
  }
  prev = 0;
  for (double g = phi + 0.05; g <= 1; g += 0.05) {
    const double p = StaticPenalty(g, b0, b1);
    CHECK(p > prev);
    prev = p;
  }
}

TEST_CASE("kvsim: the bound with late-starting tiers and completion routing at block granularity") {
  CHECK(BoundTime(6e9, {2e9, 1e9}) == Approx(2.0));
  CHECK(BoundTime(6e9, {2e9, 1e9}, {0, 1}) == Approx(7.0 / 3));  // 2(T) + 1(T-1) = 6
  CHECK(BoundTime(1e9, {2e9, 1e9}, {0, 10}) == Approx(0.5));     // done before tier 1 starts
  std::vector<double> bytes;
  const double block = 1 << 20;
  const double t = CompletionTime(256 * block, block, 1, {300e6, 100e6}, {}, &bytes);
  CHECK(bytes[0] / block == Approx(192).margin(1));
  CHECK(t <= BoundTime(256 * block, {300e6, 100e6}) + block / 100e6 + 1e-12);
  // Deeper queues lengthen the tail on the slow tier, unless it leaves the last blocks to the
  // faster one (the daemon does): then the step takes the bound.
  const double deep = CompletionTime(256 * block, block, 8, {300e6, 100e6}, {}, nullptr, false);
  CHECK(deep > CompletionTime(256 * block, block, 1, {300e6, 100e6}, {}, nullptr, false));
  CHECK(CompletionTime(256 * block, block, 8, {300e6, 100e6}) < deep);
  CHECK(CompletionTime(256 * block, block, 8, {300e6, 100e6}) ==
        Approx(BoundTime(256 * block, {300e6, 100e6})).epsilon(0.005));
}

TEST_CASE("kvsim: drives holding a chunk each read at the sum when chunks are spread in turn, not by hash") {
  const double block = 1 << 20;
  // Four drives at 100 MB/s and a replica tier at 200 MB/s; 64 chunks of 4 blocks.
  const std::vector<double> bw = {100e6, 100e6, 100e6, 100e6, 200e6};
  std::vector<uint32_t> in_turn, skewed;
  for (uint32_t c = 0; c < 64; ++c) {
    in_turn.insert(in_turn.end(), 4, (1u << (c % 4)) | 0x10u);
    skewed.insert(skewed.end(), 4, (1u << (c < 40 ? 0 : c % 4)) | 0x10u);  // most chunks on drive 0
  }
  std::vector<double> bytes;
  const double bound = 256 * block / 600e6;
  const double t = PlacedCompletionTime(block, 2, bw, in_turn, &bytes);
  CHECK(t == Approx(bound).epsilon(0.02));
  CHECK(bytes[4] == Approx(256 * block / 3).epsilon(0.03));  // the replica tier's share: its bandwidth's
  const double skew = PlacedCompletionTime(block, 2, bw, skewed, &bytes);
  CHECK(skew > t * 1.1);   // idle drives: the replica tier cannot make up for all of them
  CHECK(skew < 256 * block / 300e6);  // still faster than drive 0 with the replica tier alone
  // Without the replica tier, each drive reads only its own chunks.
  for (uint32_t& h : in_turn) h &= 0xf;
  CHECK(PlacedCompletionTime(block, 2, {100e6, 100e6, 100e6, 100e6}, in_turn) == Approx(256 * block / 400e6));
}

TEST_CASE("kvsim: reuse distances match a hand computation") {
  //                      a  b  c  a  b  b  d  a
  const auto d = ReuseDistances({1, 2, 3, 1, 2, 2, 4, 1});
  CHECK(d == std::vector<int64_t>{-1, -1, -1, 3, 3, 1, -1, 3});
  // Accesses with d > M come from storage: M = 2 -> the three reuses at distance 3.
  Demand m2 = StorageDemand(d, 2);
  CHECK(m2.reuses == 4);
  CHECK(m2.beyond == 3);
  CHECK(StorageDemand(d, 3).beyond == 0);
  CHECK(StorageDemand(d, 0).beyond == 4);
}

TEST_CASE("kvsim: demand falls as memory grows and is flat while every distance exceeds it") {
  std::vector<uint64_t> seq;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t b = 0; b < 10; ++b) seq.push_back(b);  // every reuse at distance 10
  }
  const auto d = ReuseDistances(seq);
  CHECK(StorageDemand(d, 1).beyond == StorageDemand(d, 9).beyond);
  CHECK(StorageDemand(d, 9).beyond == 20);
  CHECK(StorageDemand(d, 10).beyond == 0);
  uint64_t prev = UINT64_MAX;
  for (uint64_t m = 0; m < 12; ++m) {
    CHECK(StorageDemand(d, m).beyond <= prev);
    prev = StorageDemand(d, m).beyond;
  }
}

// A document of `blocks` trace blocks (ids 0..blocks-1) arriving at t = 0, one output token.
Request Document(uint64_t blocks) {
  Request doc;
  for (uint64_t b = 0; b < blocks; ++b) doc.blocks.push_back(b);
  doc.input_tokens = static_cast<uint32_t>(blocks * kTraceBlockTokens);
  doc.output_tokens = 1;
  return doc;
}

// `doc` read again at `at_s` with a new question of 100 tokens (in a block of its own, id 1000).
Request Reread(const Request& doc, double at_s) {
  Request again = doc;
  again.arrival_s = at_s;
  again.blocks.push_back(1000);
  again.input_tokens += 100;
  return again;
}

// Requests that each reuse a long prefix kept only on storage.
std::vector<Request> ReuseTrace(int n, double interval_s) {
  std::vector<Request> t;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.arrival_s = i * interval_s;
    r.output_tokens = 8;
    const uint64_t doc = static_cast<uint64_t>(i % 4) * 1000;
    for (uint64_t b = 0; b < 16; ++b) r.blocks.push_back(doc + b);
    r.blocks.push_back(1'000'000 + i);  // a fresh question at the end
    r.input_tokens = static_cast<uint32_t>(r.blocks.size() * kTraceBlockTokens);
    t.push_back(r);
  }
  return t;
}

TEST_CASE("kvsim: raising the arrival rate raises the TTFT gain of faster retrieval") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;  // everything reused comes from storage
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{2e9, 1e9}; };
  auto gain = [&](double interval) {
    const auto trace = ReuseTrace(200, interval);
    const double slow = Simulate(trace, node, {PolicyKind::kStatic, 0.5}).ttft_mean;
    const double fast = Simulate(trace, node, {PolicyKind::kCompletion}).ttft_mean;
    REQUIRE(fast < slow);
    return slow - fast;
  };
  const double light = gain(4.0), heavy = gain(2.0);
  INFO("TTFT gain at 1x " << light << " s, at 2x " << heavy << " s");
  CHECK(heavy > light);
}

TEST_CASE("kvsim: slower writes stall a saturated node, and primary replication writes and reads tier 0 only") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;
  node.staging_bytes = 1e9;
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{2e9, 1e9}; };
  const auto trace = ReuseTrace(200, 0.05);  // arrivals faster than the node: writes pile up
  const PolicyResult as_reads = Simulate(trace, node, {PolicyKind::kCompletion});
  node.write_bandwidth = {0.5e9, 0.25e9};
  const PolicyResult slow_writes = Simulate(trace, node, {PolicyKind::kCompletion});
  CHECK(slow_writes.write_stall_s > as_reads.write_stall_s);
  CHECK(slow_writes.bytes_written[0] == Approx(slow_writes.bytes_written[1]));  // all: every tier
  node.replication = {ReplicationKind::kPrimary};
  const PolicyResult primary = Simulate(trace, node, {PolicyKind::kCompletion});
  CHECK(primary.bytes_written[0] > 0);
  CHECK(primary.bytes_written[1] == 0);
  CHECK(primary.bytes_read[1] == 0);  // only tier 0 holds the chunks
  CHECK(primary.write_stall_s < slow_writes.write_stall_s);  // the slow second tier is never written
}

// Requests that reuse a little and compute a lot: `reused` blocks of one of 4 documents, then
// `fresh` new blocks each.
std::vector<Request> WriteHeavyTrace(int n, double interval_s, uint64_t reused, uint64_t fresh) {
  std::vector<Request> t;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.arrival_s = i * interval_s;
    r.output_tokens = 8;
    for (uint64_t b = 0; b < reused; ++b) r.blocks.push_back(static_cast<uint64_t>(i % 4) * 1000 + b);
    for (uint64_t b = 0; b < fresh; ++b) r.blocks.push_back(1'000'000 + i * fresh + b);
    r.input_tokens = static_cast<uint32_t>(r.blocks.size() * kTraceBlockTokens);
    t.push_back(r);
  }
  return t;
}

TEST_CASE("kvsim: reads from partial replicas stay work-conserving among the holders") {
  NodeConfig node;
  const std::vector<double> bw = {2e9, 1e9}, none = {0, 0};
  std::vector<double> split;
  const Policy completion{PolicyKind::kCompletion};
  const double all_shared = PartialReplicaTime(completion, node, 0, 3e9, 0, bw, none, &split);
  CHECK(all_shared == Approx(1.0).epsilon(0.01));  // the bound: 3 GB at 3 GB/s
  const double only0 = PartialReplicaTime(completion, node, 3e9, 0, 0, bw, none, &split);
  CHECK(only0 == Approx(1.5));  // tier 0 alone
  CHECK(split[1] == 0);
  // A third on both: tier 1 reads all of it while tier 0 reads the rest.
  const double third = PartialReplicaTime(completion, node, 2e9, 1e9, 0, bw, none, &split);
  CHECK(third == Approx(1.0).epsilon(0.01));
  CHECK(split[1] <= 1e9 + 1);
  // Little on both: tier 1 runs out, tier 0's own bytes decide.
  const double little = PartialReplicaTime(completion, node, 2.8e9, 0.2e9, 0, bw, none, &split);
  CHECK(little == Approx(1.4));
  const Policy half{PolicyKind::kStatic, 0.5};
  CHECK(PartialReplicaTime(half, node, 2.8e9, 0.2e9, 0, bw, none, &split) == Approx(1.4));
}

TEST_CASE("kvsim: adaptive replication never loses to serial or full replication, and keeps the read gain") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;
  node.staging_bytes = 2e9;
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{2e9, 1e9}; };
  auto run = [&](const std::vector<Request>& trace, Policy policy, ReplicationKind kind) {
    node.replication = {kind};
    return Simulate(trace, node, policy);
  };
  for (const auto& [what, trace] : {std::pair{"write-heavy", WriteHeavyTrace(300, 0.05, 4, 12)},
                                    std::pair{"read-heavy", WriteHeavyTrace(300, 0.3, 16, 1)}}) {
    INFO(what);
    const PolicyResult serial = run(trace, {PolicyKind::kSerial}, ReplicationKind::kAll);
    const PolicyResult all = run(trace, {PolicyKind::kCompletion}, ReplicationKind::kAll);
    const PolicyResult adaptive = run(trace, {PolicyKind::kCompletion}, ReplicationKind::kAdaptive);
    INFO("req/s serial " << serial.throughput_rps << " all " << all.throughput_rps << " adaptive "
                         << adaptive.throughput_rps << "; TTFT " << serial.ttft_mean << " " << all.ttft_mean << " "
                         << adaptive.ttft_mean);
    CHECK(adaptive.throughput_rps >= 0.99 * std::max(serial.throughput_rps, all.throughput_rps));
    CHECK(adaptive.ttft_mean <= 1.01 * std::min(serial.ttft_mean, all.ttft_mean));
    CHECK(adaptive.write_stall_s <= serial.write_stall_s + 1e-9);  // a secondary never stalls a step
    CHECK(adaptive.bytes_written[1] <= all.bytes_written[1]);
    if (std::string(what) == "write-heavy") {
      CHECK(all.write_stall_s > serial.write_stall_s);  // what full replication costs here
      CHECK(adaptive.secondary_dropped_bytes > 0);      // copies the slow tier could not take
    } else {
      CHECK(adaptive.bytes_read[1] > 0);  // reads still come from both tiers
      CHECK(adaptive.retrieval_s < 0.9 * serial.retrieval_s);
    }
  }
}

// --- Load or recompute: the verdict policy (docs/design-notes.md, "Load or recompute in kvsim") ---

TEST_CASE("kvsim verdict: prefill cost is the weights' linear term plus attention's quadratic one") {
  const ModelProfile p = *FindProfile("32B");  // Qwen2.5-32B's shape: 64 layers, 40 heads x 128
  REQUIRE(p.layers == 64);
  REQUIRE(p.heads == 40);
  REQUIRE(p.head_dim == 128);
  // 1000 new tokens, nothing before: 1000 x 25 us for the weights; attention 4 x 64 x 40 x 128
  // flops per causal pair, 1000 x 1001 / 2 pairs, at 2 x 32.5e9 / 25 us = 2.6 PFLOP/s.
  const double rate = 2 * 32.5e9 / 25e-6;
  CHECK(PrefillSeconds(p, 1000, 0) == Approx(1000 * 25e-6 + 1310720.0 * 500500 / rate));
  // After 4000 tokens of context each new token also attends to those.
  CHECK(PrefillSeconds(p, 1000, 4000) == Approx(1000 * 25e-6 + 1310720.0 * (4e6 + 500500) / rate));
  CHECK(PrefillSeconds(p, 1000, 4000, false) == Approx(1000 * 25e-6));
  // Chunked prefill costs what one pass does: 32k tokens in four chunks of 8k.
  double chunks = 0;
  for (int i = 0; i < 4; ++i) chunks += PrefillSeconds(p, 8192, 8192.0 * i);
  CHECK(chunks == Approx(PrefillSeconds(p, 32768, 0)));
  // At 128k tokens attention costs more than the weights (quadratic beats linear).
  CHECK(PrefillSeconds(p, 131072, 0) > 2 * PrefillSeconds(p, 131072, 0, false));
  // Every profile's KV bytes per token follow its shape (2 x layers x KV heads x head dim x 2
  // bytes): exactly for 8B (Llama-3-8B), within the paper's rounding (KB for KiB) for the others.
  CHECK(FindProfile("8B")->kv_bytes_per_token == 128 * 1024);
  for (const std::string& name : ProfileNames()) {
    const ModelProfile m = *FindProfile(name);
    INFO(name);
    CHECK(m.kv_bytes_per_token == Approx(4.0 * m.layers * m.kv_heads * m.head_dim).epsilon(0.03));
    CHECK(m.heads * m.head_dim == m.hidden);
  }
}

TEST_CASE("kvsim verdict: the simulated prefill pays the attention term the verdict counts") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{2e9, 1e9}; };
  Request r;
  r.input_tokens = 32768;
  r.output_tokens = 1;
  for (uint64_t b = 0; b < 64; ++b) r.blocks.push_back(b);
  const double with = Simulate({r}, node, {PolicyKind::kRecompute}).ttft_mean;
  node.attention = false;
  const double without = Simulate({r}, node, {PolicyKind::kRecompute}).ttft_mean;
  CHECK(with - without == Approx(PrefillSeconds(node.profile, 32768, 0) - PrefillSeconds(node.profile, 32768, 0, false)));
}

// A cached prefix of `blocks` trace blocks on storage, held by the tiers of `holders`.
std::vector<HitBlock> StoredPrefix(uint32_t blocks, uint32_t holders, double bytes_per_token) {
  return std::vector<HitBlock>(blocks, HitBlock{kTraceBlockTokens * bytes_per_token, holders});
}

TEST_CASE("kvsim verdict: slow storage means recompute, fast storage means load it all") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  const uint32_t blocks = 64, input = blocks * kTraceBlockTokens + 100;  // 32k tokens cached, 100 new
  const auto prefix = StoredPrefix(blocks, 0b11, node.profile.kv_bytes_per_token);
  using Rates = std::vector<kvstream::TierRate>;
  for (bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    node.overlap = overlap;
    // 10 MB/s: the 8.4 GB prefix takes minutes; its prefill about a second.
    const Cut slow = ChooseCut(node, Rates{{5e6, 0}, {5e6, 0}}, prefix, input, 0, 0);
    CHECK(slow.blocks == 0);
    CHECK(slow.recompute_s == Approx(PrefillSeconds(node.profile, input, 0) + input * 0.018 / 8192));
    // 10 GB/s: 0.84 s to load against ~1.15 s to compute.
    const Cut fast = ChooseCut(node, Rates{{5e9, 0}, {5e9, 0}}, prefix, input, 0, 0);
    CHECK(fast.blocks == blocks);
    CHECK(fast.load_s == Approx(blocks * kTraceBlockTokens * node.profile.kv_bytes_per_token / 10e9));
    // The same bytes held by one 5 GB/s tier only: the load model reads them at 5, not 10 GB/s,
    // and then computing is faster.
    CHECK(ChooseCut(node, Rates{{5e9, 0}, {5e9, 0}}, StoredPrefix(blocks, 0b01, node.profile.kv_bytes_per_token),
                    input, 0, 0).blocks == 0);
  }
}

TEST_CASE("kvsim verdict: reads queued ahead count only where the engine waits for them") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  const uint32_t blocks = 64, input = blocks * kTraceBlockTokens + 100;
  const auto prefix = StoredPrefix(blocks, 0b11, node.profile.kv_bytes_per_token);
  // The tiers are busy for 2 s with the reads of requests admitted before.
  const std::vector<kvstream::TierRate> busy = {{5e9, 2}, {5e9, 2}};
  // Sequential steps read those anyway before this request's first step: load it all.
  node.overlap = false;
  CHECK(ChooseCut(node, busy, prefix, input, 0, 2).blocks == blocks);
  // Overlapped, with no prefill work ahead, the request would wait 2 s for storage: compute.
  node.overlap = true;
  CHECK(ChooseCut(node, busy, prefix, input, 0, 0).blocks == 0);
  // With 3 s of prefill work ahead, the load is hidden behind it: load it all.
  CHECK(ChooseCut(node, busy, prefix, input, 3, 0).blocks == blocks);
  // At 1 GB/s (8.4 s for the prefix) and 4 s of work ahead, it loads what lands within the 4 s
  // and computes the rest: an interior cut.
  const Cut part = ChooseCut(node, {{0.5e9, 0}, {0.5e9, 0}}, prefix, input, 4, 0);
  INFO("cut " << part.blocks << " load " << part.load_s << " s");
  CHECK(part.blocks > 0);
  CHECK(part.blocks < blocks);
  CHECK(part.load_s == Approx(4).margin(8.4 / blocks + 1e-9));
}

TEST_CASE("kvsim verdict: staging full drops the latest prefix blocks instead of stalling the step") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;  // everything reused comes from storage
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{10e9}; };
  node.write_bandwidth = {1e6};  // writes barely drain
  const double block_kv = kTraceBlockTokens * node.profile.kv_bytes_per_token;
  node.staging_bytes = 10.5 * block_kv;  // room for 10 blocks
  // A 64-block document computed at t = 0, then read again with a new question at t = 100.
  const Request first = Document(64);
  const Request again = Reread(first, 100);
  const std::vector<Request> trace = {first, again};
  const PolicyResult completion = Simulate(trace, node, {PolicyKind::kCompletion});
  CHECK(completion.write_stall_s > 0);  // the engine waits for 54 blocks at 1 MB/s
  CHECK(completion.storage_hit_blocks == 64);
  const PolicyResult once = Simulate({first}, node, {PolicyKind::kVerdict});
  CHECK(once.write_stall_s == 0);
  CHECK(once.write_dropped_bytes == Approx(54 * block_kv));
  CHECK(once.bytes_written[0] == Approx(10 * block_kv));
  CHECK(once.ttft[0] < completion.ttft[0]);
  // The ten it kept are the first ten: the second read finds exactly those on storage.
  const PolicyResult verdict = Simulate(trace, node, {PolicyKind::kVerdict});
  CHECK(verdict.write_stall_s == 0);
  CHECK(verdict.storage_hit_blocks + verdict.hit_blocks_computed == 10);
}

TEST_CASE("kvsim verdict: with overlap a request waiting for its load lets the others compute") {
  NodeConfig node;
  node.profile = *FindProfile("32B");
  node.memory_bytes = 0;
  node.bandwidth = [](uint64_t, double) { return std::vector<double>{0.2e9, 0.1e9}; };
  // A long document computed first; later it is read again beside a short fresh request.
  const Request doc = Document(64);
  const Request reread = Reread(doc, 100);
  Request fresh;
  fresh.arrival_s = 100;
  fresh.blocks = {2000, 2001};
  fresh.input_tokens = 1000;
  fresh.output_tokens = 1;
  const std::vector<Request> trace = {doc, reread, fresh};
  const PolicyResult steps = Simulate(trace, node, {PolicyKind::kCompletion});
  node.overlap = true;
  const PolicyResult overlapped = Simulate(trace, node, {PolicyKind::kCompletion});
  const double load = 64 * kTraceBlockTokens * node.profile.kv_bytes_per_token / 0.3e9;  // 28 s
  // Inside the steps, the short request's first step carries the 28 s read; overlapped it does not.
  CHECK(steps.ttft[2] > load);
  CHECK(overlapped.ttft[2] < 0.5);
  CHECK(overlapped.ttft[1] > load);  // the reread itself still waits for its load
  CHECK(overlapped.retrieval_s == Approx(steps.retrieval_s).epsilon(0.01));
}

TEST_CASE("kvsim verdict: the long-document workload is seeded, and --load sets the offered work") {
  auto o = ParseSynthetic("long-doc:4:3");
  REQUIRE(o.ok());
  CHECK(o->docs == 4);
  CHECK(o->reads == 3);
  CHECK(!ParseSynthetic("long-doc:0").ok());
  CHECK(!ParseSynthetic("short-doc").ok());
  const auto a = LongDocTrace(*o, 7), b = LongDocTrace(*o, 7), c = LongDocTrace(*o, 8);
  REQUIRE(a.size() == 12);
  bool differ = false;
  std::map<uint64_t, int> reads;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].blocks == b[i].blocks);
    CHECK(a[i].arrival_s == b[i].arrival_s);
    differ |= a[i].blocks != c[i].blocks || a[i].arrival_s != c[i].arrival_s;
    const uint32_t doc_tokens = (a[i].blocks.size() - 1) * kTraceBlockTokens;
    CHECK(doc_tokens >= 32768);
    CHECK(doc_tokens <= 131072);
    CHECK(a[i].input_tokens > doc_tokens);  // a short suffix of its own, in one block
    CHECK(a[i].input_tokens < doc_tokens + kTraceBlockTokens);
    CHECK(a[i].blocks.back() >> 62 == 1);
    ++reads[a[i].blocks[0]];
    if (i > 0) CHECK(a[i].arrival_s >= a[i - 1].arrival_s);
  }
  CHECK(differ);
  CHECK(reads.size() == 4);
  for (auto [doc, n] : reads) CHECK(n == 3);
  // Two requests 10 s apart whose prefill takes w seconds in all: --load 0.5 stretches 10 s to 2w.
  NodeConfig node;
  node.profile = *FindProfile("32B");
  std::vector<Request> two(2);
  two[1].arrival_s = 10;
  two[0].input_tokens = two[1].input_tokens = 4096;
  const double w = 2 * (PrefillSeconds(node.profile, 4096, 0) + 4096 * node.profile.step_base_s / node.token_budget);
  CHECK(10 / OfferedLoadRate(two, node, 0.5) == Approx(2 * w));
}

}  // namespace
}  // namespace kvsim

#include <fstream>

#include "schedule.h"
#include "test_util.h"
#include "trace.h"

namespace kvsim {
namespace {

TEST_CASE("kvsim: bandwidth schedules are constant, periodic or replayed from step records") {
  auto constant = MakeSchedule({3e9, 1e9}, "constant");
  REQUIRE(constant.ok());
  CHECK((*constant)(7, 12.0) == std::vector<double>{3e9, 1e9});
  auto periodic = MakeSchedule({3e9, 1e9}, "periodic:4:0.5");
  REQUIRE(periodic.ok());
  CHECK((*periodic)(0, 1.0)[1] == Approx(1.5e9));  // a quarter period: sin = 1
  CHECK((*periodic)(0, 1.0)[0] == Approx(3e9));
  CHECK(!MakeSchedule({3e9, 1e9}, "periodic:4:1.5").ok());
  CHECK(!MakeSchedule({3e9, 1e9}, "bursty").ok());

  kvstream::testing::TempDir dir;
  const std::string records = dir.sub("steps.json");
  std::ofstream(records) << R"({"policies": [{"policy": "fastest", "steps": [{"tiers": [{"bandwidth_bps": 1}, {"bandwidth_bps": 1}]}]},
    {"policy": "completion", "steps": [{"tiers": [{"bandwidth_bps": 3e8}, {"bandwidth_bps": 1.5e8}]},
                                       {"tiers": [{"bandwidth_bps": 2e8}, {"bandwidth_bps": 1e8}]}]}]})";
  auto replay = MakeSchedule({1, 1}, "replay:" + records);
  REQUIRE(replay.ok());
  CHECK((*replay)(0, 0) == std::vector<double>{3e8, 1.5e8});
  CHECK((*replay)(1, 0) == std::vector<double>{2e8, 1e8});
  CHECK((*replay)(2, 0) == std::vector<double>{3e8, 1.5e8});  // cycles
  const std::string rows = dir.sub("rows.txt");
  std::ofstream(rows) << "1e9 2e9\n\n3e9 4e9\n";
  auto text = LoadReplay(rows, 2);
  REQUIRE(text.ok());
  CHECK(text->size() == 2);
  CHECK(!LoadReplay(rows, 3).ok());  // wrong number of tiers is an error, not a guess
}

TEST_CASE("kvsim: arrival order and rate rearrange requests but keep the arrival times") {
  std::vector<Request> t(4);
  for (int i = 0; i < 4; ++i) {
    t[i].arrival_s = i;
    t[i].session = i < 3 ? 1 : 2;  // session 1: requests 0,1,2; session 2: request 3
    t[i].input_tokens = 100 + i;
  }
  auto rr = Arrange(t, 2.0, ArrivalOrder::kSessionsRoundRobin, 1);
  REQUIRE(rr.size() == 4);
  CHECK(rr[0].input_tokens == 100);
  CHECK(rr[1].input_tokens == 103);  // the other session's turn
  CHECK(rr[2].input_tokens == 101);
  CHECK(rr[3].arrival_s == Approx(1.5));  // times compressed by the rate
  auto random = Arrange(t, 1.0, ArrivalOrder::kSessionsRandom, 7);
  std::vector<uint32_t> s1;
  for (const Request& r : random) if (r.session == 1) s1.push_back(r.input_tokens);
  CHECK(s1 == std::vector<uint32_t>{100, 101, 102});  // each session keeps its own order
}

}  // namespace
}  // namespace kvsim

#include "nodes.h"
#include "nodes_input.h"

namespace kvsim {
namespace {

constexpr double kMiB = 1 << 20;

// n equal nodes at the given loads (one per node), NVMe b, PFS B, steps of d bytes.
Cluster Nodes(const std::vector<double>& loads, double b, double pfs, double d) {
  Cluster c;
  c.pfs_bps = pfs;
  for (size_t i = 0; i < loads.size(); ++i) c.nodes.push_back({b, d, 0});
  for (size_t i = 0; i < loads.size(); ++i) c.nodes[i].gap_s = GapForLoad(c, i, loads[i]);
  return c;
}

// The PFS share of a step alone at these bandwidths, from the two-tier completion model.
double CompletionShare(const Cluster& c, double b, double pfs, double d) {
  std::vector<double> split;
  CompletionTime(d, c.block_bytes, c.queue_depth, {b, pfs}, {}, &split);
  return split[1] / d;
}

TEST_CASE("kvsim nodes: one node is the two-tier completion model") {
  struct Case {
    double b, pfs, d;
  };
  for (const Case& k : {Case{300e6, 150e6, 256 * kMiB}, Case{300e6, 300e6, 256 * kMiB}, Case{12e9, 6e9, 4096 * kMiB},
                        Case{300e6, 50e6, 100.5 * kMiB}}) {
    for (bool takeover : {false, true}) {
      INFO("nvme " << k.b << " pfs " << k.pfs << " step " << k.d << " takeover " << takeover);
      Cluster c = Nodes({1}, k.b, k.pfs, k.d);
      c.takeover = takeover;
      std::vector<double> split;
      const double t = CompletionTime(k.d, c.block_bytes, c.queue_depth, {k.b, k.pfs}, {}, &split, takeover);
      c.window_s = 100 * t;
      const NodeResult r = SimulateCluster(c).nodes[0];
      CHECK(r.steps >= 99);
      CHECK(r.bound_s == Approx(BoundTime(k.d, {k.b, k.pfs})).epsilon(1e-6));
      CHECK(r.solo_s == Approx(t));
      if (takeover && k.pfs < 100e6) {
        // A PFS block takes 21 ms here: the idle NVMe takes the last ones over, so the step is
        // shorter than CompletionTime's (which waits for them) and no shorter than the bound.
        CHECK(r.takeovers > 0);
        CHECK(r.step_s < t);
        CHECK(r.step_s >= r.bound_s);
        continue;
      }
      CHECK(r.step_s == Approx(t).epsilon(0.01));
      CHECK(r.pfs_share == Approx(split[1] / k.d).epsilon(0.01));
      CHECK(r.takeovers == 0);  // a PFS block lands within 4 NVMe block times
    }
  }
  // A load sets the gap: the node reads that fraction of the time; the step stays the same.
  for (GapDistribution gaps : {GapDistribution::kFixed, GapDistribution::kExponential}) {
    Cluster c = Nodes({0.4}, 300e6, 150e6, 256 * kMiB);
    c.gaps = gaps;
    const NodeResult r = SimulateCluster(c).nodes[0];
    CHECK(r.busy == Approx(0.4).margin(gaps == GapDistribution::kFixed ? 0.005 : 0.03));
    CHECK(r.step_s == Approx(r.solo_s).epsilon(1e-9));
  }
  // A per-node cap is a slower PFS for a node alone.
  Cluster capped = Nodes({1}, 300e6, 600e6, 256 * kMiB);
  capped.pfs_node_cap_bps = 150e6;
  const NodeResult r = SimulateCluster(capped).nodes[0];
  CHECK(r.pfs_share == Approx(CompletionShare(capped, 300e6, 150e6, 256 * kMiB)).epsilon(0.01));
  CHECK(r.pfs_bps_reading <= 150e6 * (1 + 1e-9));
}

TEST_CASE("kvsim nodes: nodes reading back to back share the PFS equally, B/N each") {
  const double b = 300e6, pfs = 300e6, d = 256 * kMiB;
  const Cluster c = Nodes({1, 1, 1, 1}, b, pfs, d);
  const ClusterResult r = SimulateCluster(c);
  const double quarter = CompletionShare(c, b, pfs / 4, d);
  std::vector<double> split;
  const double step = CompletionTime(d, c.block_bytes, c.queue_depth, {b, pfs / 4}, {}, &split);
  for (const NodeResult& n : r.nodes) {
    CHECK(n.pfs_share == Approx(r.nodes[0].pfs_share).margin(0.001));
    // About B/4: a node between its PFS blocks leaves the others a third each, and at the end of
    // a step its NVMe takes over its last PFS block (14 ms at B/4).
    CHECK(n.pfs_share == Approx(quarter).margin(0.01));
    CHECK(n.step_s == Approx(step).epsilon(0.02));
  }
  CHECK(r.pfs_bytes_per_s <= pfs * (1 + 1e-9));
  CHECK(r.pfs_bytes_per_s >= 0.99 * pfs);  // back to back, the PFS never rests
  // Equal loads below 1: equal shares (up to the seeded gaps), between all-busy and alone.
  Cluster halves = Nodes({0.5, 0.5, 0.5, 0.5}, b, pfs, d);
  halves.window_s = 2000;  // long enough for the seeded gaps to even out
  const ClusterResult half = SimulateCluster(halves);
  const double alone = CompletionShare(c, b, pfs, d);
  for (const NodeResult& n : half.nodes) {
    CHECK(n.pfs_share == Approx(half.nodes[0].pfs_share).margin(0.01));
    CHECK(n.pfs_share > r.nodes[0].pfs_share + 0.02);
    CHECK(n.pfs_share < alone - 0.02);
  }
}

TEST_CASE("kvsim nodes: a light node reads beside the busy ones, so it gets a smaller PFS share than they do") {
  // Within one cluster the busy node reads alone whenever the light one is idle, and the light one
  // always reads beside the busy one: it gets exactly half the PFS (the inspection paradox).
  const double b = 300e6, pfs = 300e6, d = 256 * kMiB;
  const Cluster c = Nodes({1, 0.25}, b, pfs, d);
  const ClusterResult r = SimulateCluster(c);
  const NodeResult &busy = r.nodes[0], &light = r.nodes[1];
  CHECK(light.pfs_bps_reading == Approx(pfs / 2).epsilon(0.02));
  CHECK(light.pfs_share == Approx(CompletionShare(c, b, pfs / 2, d)).margin(0.01));
  CHECK(busy.pfs_share > light.pfs_share + 0.05);
  CHECK(busy.pfs_share < CompletionShare(c, b, pfs, d));
  CHECK(busy.step_s < light.step_s);
  // The same in a larger mix: shares fall with the node's load.
  const ClusterResult mix = SimulateCluster(Nodes({1, 0.5, 0.25}, b, pfs, d));
  CHECK(mix.nodes[0].pfs_share > mix.nodes[1].pfs_share);
  CHECK(mix.nodes[1].pfs_share > mix.nodes[2].pfs_share);
}

TEST_CASE("kvsim nodes: a node's PFS share rises as the other nodes' load falls") {
  // Busy clusters give every node a lower PFS share, light ones a higher one, up to the share it
  // gets alone.
  const double b = 300e6, pfs = 300e6, d = 256 * kMiB;
  double prev = 0;
  for (double others : {1.0, 0.5, 0.25, 0.05}) {
    INFO("the other three at load " << others);
    const ClusterResult r = SimulateCluster(Nodes({0.5, others, others, others}, b, pfs, d));
    CHECK(r.nodes[0].pfs_share > prev + 0.05);
    prev = r.nodes[0].pfs_share;
  }
  const Cluster c = Nodes({1}, b, pfs, d);
  CHECK(prev == Approx(CompletionShare(c, b, pfs, d)).margin(0.04));
  prev = 0;
  for (double load : {1.0, 0.5, 0.25, 0.1}) {
    INFO("every node at load " << load);
    const ClusterResult r = SimulateCluster(Nodes({load, load, load, load}, b, pfs, d));
    double lowest = 1;
    for (const NodeResult& n : r.nodes) lowest = std::min(lowest, n.pfs_share);
    CHECK(lowest > prev + 0.03);
    prev = lowest;
  }
}

TEST_CASE("kvsim nodes: the aggregate with a shared PFS beats every node reading its NVMe alone") {
  const double b = 300e6, d = 256 * kMiB;
  for (size_t n : {1, 2, 4, 8}) {
    for (double pfs : {b / 2, b, 2 * b}) {
      std::vector<double> loads;
      for (size_t i = 0; i < n; ++i) loads.push_back(std::vector<double>{1, 0.5, 0.25}[i % 3]);
      INFO(n << " nodes, PFS " << pfs);
      const ClusterResult r = SimulateCluster(Nodes(loads, b, pfs, d));
      CHECK(r.ratio > 1);
      CHECK(r.bytes_per_s > r.nvme_only_bytes_per_s);
      for (const NodeResult& x : r.nodes) CHECK(x.step_s < x.nvme_only_s);
      CHECK(r.pfs_bytes_per_s <= pfs * (1 + 1e-9));
    }
  }
  // Many nodes on a thin share: a PFS block takes longer than the NVMe's whole tail, so without
  // the NVMe taking over stragglers a node reads slower than from its NVMe alone.
  Cluster thin = Nodes({1, 1, 1, 1, 1, 1, 1, 1}, b, b / 4, d);
  const ClusterResult with = SimulateCluster(thin);
  thin.takeover = false;
  const ClusterResult without = SimulateCluster(thin);
  CHECK(without.ratio < 0.95);
  CHECK(with.ratio > 0.99);
  CHECK(with.nodes[0].takeovers > 0);
}

TEST_CASE("kvsim nodes: shares stay between 0 and 1, the PFS is never oversubscribed, and a seed fixes the result") {
  uint64_t x = 7;
  for (int round = 0; round < 40; ++round) {
    Cluster c;
    const size_t n = 1 + round % 6;
    c.pfs_bps = std::vector<double>{0, 50e6, 300e6, 2e9}[round % 4];
    c.pfs_node_cap_bps = round % 5 == 0 ? 100e6 : 0;
    c.queue_depth = 1 + round % 4;
    c.gaps = round % 2 ? GapDistribution::kFixed : GapDistribution::kExponential;
    c.seed = round;
    for (size_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const double d = std::vector<double>{0.5, 1.5, 7, 64}[(x >> 33) % 4] * kMiB;
      c.nodes.push_back({std::vector<double>{100e6, 300e6, 1e9}[(x >> 40) % 3], d, ((x >> 50) % 4) * 0.05});
    }
    INFO("round " << round);
    const ClusterResult r = SimulateCluster(c);
    CHECK(r.pfs_bytes_per_s <= c.pfs_bps * (1 + 1e-9));
    for (size_t i = 0; i < n; ++i) {
      const NodeResult& y = r.nodes[i];
      CHECK(y.steps > 0);
      CHECK(y.pfs_share >= 0);
      CHECK(y.pfs_share <= 1);
      if (c.pfs_bps == 0) CHECK(y.pfs_share == 0);
      CHECK(y.busy >= 0);
      CHECK(y.busy <= 1 + 1e-9);
      CHECK(y.step_s >= y.bound_s * (1 - 1e-9));
      CHECK(y.bound_s >= BoundTime(c.nodes[i].step_bytes, {c.nodes[i].nvme_bps, c.pfs_bps}) * (1 - 1e-9));
    }
  }
  Cluster c = Nodes({1, 0.5, 0.3}, 300e6, 300e6, 64 * kMiB);
  const ClusterResult a = SimulateCluster(c), b = SimulateCluster(c);
  c.seed = 2;
  const ClusterResult other = SimulateCluster(c);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(a.nodes[i].step_s == b.nodes[i].step_s);
    CHECK(a.nodes[i].pfs_share == b.nodes[i].pfs_share);
    CHECK(other.nodes[i].pfs_share == Approx(a.nodes[i].pfs_share).margin(0.02));
  }
  CHECK(other.nodes[2].step_s != a.nodes[2].step_s);
}

TEST_CASE("kvsim nodes: bandwidths take decimal B and binary iB units, and the --validate-nodes file loads") {
  CHECK(*ParseRate("3e8") == 3e8);
  CHECK(*ParseRate("300MB") == 3e8);
  CHECK(*ParseRate("300 mb/s") == 3e8);
  CHECK(*ParseRate("2.5G") == 2.5e9);
  CHECK(*ParseRate("300MiB") == 300 * kMiB);
  CHECK(*ParseRate("1TiB/s") == 1024.0 * 1024 * 1024 * 1024);
  for (const char* bad : {"", "fast", "300XB", "-1", "0", "300MBs", "1e"}) {
    INFO(bad);
    CHECK(!ParseRate(bad).ok());
  }
  auto list = ParseRates("300MB,1e9");
  REQUIRE(list.ok());
  CHECK(*list == std::vector<double>{3e8, 1e9});
  CHECK(!ParseRates("300MB,").ok());

  kvstream::testing::TempDir dir;
  const std::string path = dir.sub("nodes.json");
  std::ofstream(path) << R"({"pfs_bps": 3e8, "queue_depth": 3,
    "nodes": [{"node": "a", "nvme_bps": 3e8, "step_bytes": 268435456, "gap_s": 0.5, "pfs_share": 0.31, "step_s": 0.6},
              {"nvme_bps": 1e8, "step_bytes": 1e6, "pfs_share": 0.5}]})";
  Cluster defaults;
  defaults.seed = 9;
  defaults.block_bytes = 4096;
  auto f = LoadNodesFile(path, defaults);
  REQUIRE(f.ok());
  CHECK(f->cluster.pfs_bps == 3e8);
  CHECK(f->cluster.queue_depth == 3);
  CHECK(f->cluster.seed == 9);            // not in the file: the default
  CHECK(f->cluster.block_bytes == 4096);
  REQUIRE(f->cluster.nodes.size() == 2);
  CHECK(f->cluster.nodes[0].gap_s == 0.5);
  CHECK(f->cluster.nodes[1].gap_s == 0);  // back to back when not given
  CHECK(f->measured[0].name == "a");
  CHECK(f->measured[1].name == "n1");
  CHECK(f->measured[0].step_s == 0.6);
  CHECK(std::isnan(f->measured[1].step_s));
  std::ofstream(path) << R"({"pfs_bps": 3e8, "nodes": [{"nvme_bps": 3e8, "step_bytes": 1e6, "pfs_share": 1.5}]})";
  CHECK(!LoadNodesFile(path, defaults).ok());
  std::ofstream(path) << R"({"nodes": [{"nvme_bps": 3e8, "step_bytes": 1e6, "pfs_share": 0.5}]})";
  CHECK(!LoadNodesFile(path, defaults).ok());  // no pfs_bps
}

}  // namespace
}  // namespace kvsim
