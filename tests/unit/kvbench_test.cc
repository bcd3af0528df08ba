// kvbench's report arithmetic (bounds, gaps, speedups, shares) on hand-made and recorded inputs,
// and its workloads.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "bench_math.h"
#include "test_util.h"
#include "workload.h"

namespace kvbench {
namespace {

Run MakeRun(const std::string& label, const std::vector<StepSample>& steps) { return {label, steps}; }

TEST_CASE("the bound of each step uses the bandwidths the tiers reached alone on that step") {
  // Step 0: t0 alone 100 MB/s, t1 alone 50 MB/s. Step 1: t1 drops to 25 MB/s.
  const Run t0 = MakeRun("only:t0", {{1.0, 100'000'000, {100'000'000, 0}}, {1.0, 100'000'000, {100'000'000, 0}}});
  const Run t1 = MakeRun("only:t1", {{2.0, 100'000'000, {0, 100'000'000}}, {4.0, 100'000'000, {0, 100'000'000}}});
  const Run serial = MakeRun("serial", {{1.1, 100'000'000, {100'000'000, 0}}, {1.1, 100'000'000, {100'000'000, 0}}});
  const Run run = MakeRun("completion", {{0.7, 100'000'000, {66'000'000, 34'000'000}},
                                         {0.8, 100'000'000, {80'000'000, 20'000'000}}});
  const auto bounds = StepBounds(run, {&t0, &t1});
  REQUIRE(bounds.size() == 2);
  CHECK(bounds[0] == Approx(100.0 / 150));
  CHECK(bounds[1] == Approx(100.0 / 125));
  const Summary s = Summarize(run, {&t0, &t1}, &serial);
  CHECK(s.total_seconds == Approx(1.5));
  CHECK(s.bound_seconds == Approx(100.0 / 150 + 100.0 / 125));
  CHECK(s.gap == Approx(1.5 / (100.0 / 150 + 100.0 / 125) - 1));
  CHECK(s.speedup_vs_serial == Approx(2.2 / 1.5));
  CHECK(s.throughput_bps == Approx(200e6 / 1.5));
  REQUIRE(s.tier_share.size() == 2);
  CHECK(s.tier_share[0] == Approx(0.73));
  CHECK(s.tier_share[1] == Approx(0.27));
  CHECK(Bandwidth(t1) == Approx(200e6 / 6));
}

TEST_CASE("a static split's gap matches max(g/phi and (1-g)/(1-phi)) minus one") {
  const double b0 = 300e6, b1 = 150e6, d = 300e6, phi = b0 / (b0 + b1);
  const Run t0 = MakeRun("only:t0", {{d / b0, static_cast<uint64_t>(d), {}}});
  const Run t1 = MakeRun("only:t1", {{d / b1, static_cast<uint64_t>(d), {}}});
  for (double g : {0.5, 0.67, 0.9}) {
    const double seconds = std::max(g * d / b0, (1 - g) * d / b1);
    const Run run = MakeRun("static", {{seconds, static_cast<uint64_t>(d), {}}});
    CHECK(Summarize(run, {&t0, &t1}, nullptr).gap == Approx(std::max(g / phi, (1 - g) / (1 - phi)) - 1));
  }
}

TEST_CASE("without alone runs there is no bound and without serial no speedup") {
  const Run run = MakeRun("completion", {{1.0, 10, {10}}});
  const Summary s = Summarize(run, {}, nullptr);
  CHECK(s.bound_seconds == 0);
  CHECK(s.gap == 0);
  CHECK(s.speedup_vs_serial == 0);
  const Run short_alone = MakeRun("only:t0", {});
  CHECK(StepBounds(run, {&short_alone})[0] == 0);  // the alone run lacks the step
}

// A kvbench --json output recorded on two loop-device tiers capped at 300 and 150 MB/s: the
// summaries recomputed from its per-step samples match the ones it printed.
TEST_CASE("recorded kvbench results recompute to the same bounds and gaps and speedups") {
  std::ifstream in(std::string(KVSTREAM_TEST_DATA) + "/kvbench_steady.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<Run> runs;
  for (const auto& r : j.at("runs")) {
    Run run{r.at("label").get<std::string>(), {}};
    for (const auto& s : r.at("steps")) {
      run.steps.push_back({s.at("seconds").get<double>(), s.at("bytes").get<uint64_t>(),
                           s.at("tier_bytes").get<std::vector<uint64_t>>()});
    }
    runs.push_back(std::move(run));
  }
  REQUIRE(runs.size() >= 7);
  REQUIRE(runs[0].label == "only:t0");
  REQUIRE(runs[1].label == "only:t1");
  const Run* serial = nullptr;
  for (const Run& r : runs) {
    if (r.label == "serial") serial = &r;
  }
  REQUIRE(serial != nullptr);
  size_t i = 0;
  for (const auto& recorded : j.at("runs")) {
    const Summary s = Summarize(runs[i++], {&runs[0], &runs[1]}, serial);
    INFO(s.label);
    CHECK(s.gap == Approx(recorded.at("gap").get<double>()));
    CHECK(s.bound_seconds == Approx(recorded.at("bound_seconds").get<double>()));
    CHECK(s.speedup_vs_serial == Approx(recorded.at("speedup_vs_serial").get<double>()));
    CHECK(s.tier_share[0] == Approx(recorded.at("tier_share")[0].get<double>()));
    if (s.label == "completion") {
      // The recorded run itself: completion within 3% of the bound, 1.5x serial at 300+150 MB/s.
      CHECK(s.gap < 0.03);
      CHECK(s.speedup_vs_serial > 0.97 * 450.0 / 300.0);
    }
  }
}

TEST_CASE("synthetic workloads split each request into stored and new chunks") {
  auto w = Synthetic({2, 3, 4, 0.75, 1 << 20});
  REQUIRE(w.ok());
  REQUIRE(w->steps.size() == 2);
  CHECK(w->steps[0].reads.size() == 9);
  CHECK(w->steps[0].writes.size() == 3);
  CHECK(w->populate.size() == 18);
  CHECK(w->steps[0].reads[0] != w->steps[1].reads[0]);  // each step reads distinct chunks
  CHECK(RankKey("a", 3) == "a@3");
  CHECK_FALSE(Synthetic({1, 1, 1, 1.5, 1}).ok());
}

TEST_CASE("a trace is read in arrival order through a host LRU in front of storage") {
  kvstream::testing::TempDir dir;
  // Four 1024-token requests of two 512-token blocks; 1024-token chunks (one per request).
  std::ofstream(dir.sub("t.jsonl")) << R"({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [3, 4]}
{"timestamp": 2, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 3, "input_length": 1024, "output_length": 1, "hash_ids": [3, 4]}
{"timestamp": 4, "input_length": 1500, "output_length": 1, "hash_ids": [3, 4, 5]}
)";
  TraceOptions o;
  o.path = dir.sub("t.jsonl");
  o.kv_bytes_per_token = 1024;
  o.chunk_tokens = 1024;
  o.host_cache_bytes = 1024 * 1024;  // one chunk
  o.batch = 1;
  o.warmup = 2;
  o.ranks = 2;
  auto w = FromTrace(o);
  REQUIRE(w.ok());
  CHECK(w->chunk_bytes == 512 * 1024);
  // Request 2 re-reads chunk 2 (evicted from the one-chunk host cache by chunk 4): storage.
  // Request 3 re-reads chunk 4, evicted by chunk 2: storage. Request 4: chunk 4 is a host hit
  // (its partial second chunk is not stored).
  REQUIRE(w->steps.size() == 2);
  CHECK(w->steps[0].reads == std::vector<std::string>{"trace/2x2"});
  CHECK(w->steps[1].reads == std::vector<std::string>{"trace/4x2"});
  CHECK(w->storage_hits == 2);
  CHECK(w->host_hits == 1);
  CHECK(w->new_chunks == 0);
  o.chunk_tokens = 700;
  CHECK_FALSE(FromTrace(o).ok());
}

}  // namespace
}  // namespace kvbench
