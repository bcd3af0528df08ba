// kvbench's report arithmetic (bounds, gaps, speedups, shares) on hand-made and recorded inputs,
// its workloads, its run planning, and its report (text, JSON, --check verdict).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "bench_math.h"
#include "plan.h"
#include "report.h"
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
                           s.at("tier_bytes").get<std::vector<uint64_t>>(), s.value("daemon_cpu_seconds", 0.0)});
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

TEST_CASE("a key prefix puts every chunk of a workload under it, reads, writes and populate alike") {
  auto w = Synthetic({2, 1, 4, 0.5, 1 << 20});
  REQUIRE(w.ok());
  const std::string read0 = w->steps[0].reads[0], write0 = w->steps[0].writes[0], populate0 = w->populate[0];
  PrefixKeys(&*w, "node3/");
  CHECK(w->steps[0].reads[0] == "node3/" + read0);
  CHECK(w->steps[0].writes[0] == "node3/" + write0);
  CHECK(w->populate[0] == "node3/" + populate0);
  for (const auto& step : w->steps) {
    for (const auto& id : step.reads) CHECK(id.rfind("node3/", 0) == 0);
  }
  PrefixKeys(&*w, "");
  CHECK(w->populate[0] == "node3/" + populate0);  // an empty prefix changes nothing
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

// The runs of kvbench's default --policies and --write-policies, in the order they run.
TEST_CASE("the default policies plan the policy runs, then completion+idle and the write runs") {
  auto runs = PlanPolicyRuns("completion,static:0.5,static:0.67,fastest,serial", "deferred,immediate", 0.1, 0.3);
  REQUIRE(runs.ok());
  const std::vector<RunSpec> expected = {
      {"completion", "completion", "step", "deferred", false, 0.1},
      {"static:0.5", "static:0.5", "step", "deferred", false, 0.1},
      {"static:0.67", "static:0.67", "step", "deferred", false, 0.1},
      {"fastest", "fastest", "step", "deferred", false, 0.1},
      {"serial", "fastest", "serial", "deferred", false, 0.1},
      {"completion+idle", "completion", "step", "deferred", false, 0.3},
      {"completion+writes:deferred", "completion", "step", "deferred", true, 0.3},
      {"completion+writes:immediate", "completion", "step", "immediate", true, 0.3},
  };
  CHECK(*runs == expected);
}

TEST_CASE("without write policies there is no completion+idle run, and empty items are skipped") {
  auto runs = PlanPolicyRuns(",serial,,completion,", "", 0, 0.3);
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 2);
  CHECK((*runs)[0].label == "serial");
  CHECK((*runs)[1].label == "completion");
  auto writes_only = PlanPolicyRuns("", ",immediate", 0, 0.5);
  REQUIRE(writes_only.ok());
  REQUIRE(writes_only->size() == 2);
  CHECK((*writes_only)[0] == RunSpec{"completion+idle", "completion", "step", "deferred", false, 0.5});
  CHECK((*writes_only)[1] == RunSpec{"completion+writes:immediate", "completion", "step", "immediate", true, 0.5});
}

TEST_CASE("an unknown policy fails with the flag that named it, --policies first") {
  auto bad_routing = PlanPolicyRuns("completion,bogus", "bogus", 0, 0.3);
  REQUIRE_FALSE(bad_routing.ok());
  CHECK(std::string(bad_routing.status().message()).starts_with("--policies: "));
  CHECK(std::string(bad_routing.status().message()).find("bogus") != std::string::npos);
  auto bad_writes = PlanPolicyRuns("completion", "deferred,bogus", 0, 0.3);
  REQUIRE_FALSE(bad_writes.ok());
  CHECK(std::string(bad_writes.status().message()).starts_with("--write-policies: "));
}

TEST_CASE("replication runs: single-tier offloading first, then completion under each replication policy") {
  auto runs = PlanReplicationRuns("all,,adaptive", 0.2);
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 3);
  CHECK((*runs)[0] == RunSpec{"replication:serial", "fastest", "serial", "deferred", true, 0.2, "primary"});
  CHECK((*runs)[1] == RunSpec{"replication:all", "completion", "step", "deferred", true, 0.2, "all"});
  CHECK((*runs)[2] == RunSpec{"replication:adaptive", "completion", "step", "deferred", true, 0.2, "adaptive"});
  auto none = PlanReplicationRuns("", 0.2);
  REQUIRE(none.ok());
  CHECK(none->empty());
  auto bad = PlanReplicationRuns("all,sometimes", 0.2);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).starts_with("--replications: "));
}

TEST_CASE("each tier alone: static:1 and static:0 with two tiers, completion with one, none otherwise") {
  const std::vector<RunSpec> two = PlanAloneRuns({"nvme", "pfs"});
  REQUIRE(two.size() == 2);
  CHECK(two[0] == RunSpec{"only:nvme", "static:1"});
  CHECK(two[1] == RunSpec{"only:pfs", "static:0"});
  CHECK(PlanAloneRuns({"nvme"}) == std::vector<RunSpec>{{"only:nvme", "completion"}});
  CHECK(PlanAloneRuns({}).empty());
  CHECK(PlanAloneRuns({"a", "b", "c"}).empty());
  CHECK(IsAloneRun("only:nvme"));
  CHECK_FALSE(IsAloneRun("completion"));
}

TEST_CASE("each tier alone with writes: the same reads, persisting new KV on the first tier after the write gap") {
  const std::vector<RunSpec> two = PlanAloneRuns({"nvme", "pfs"}, true, 0.05);
  REQUIRE(two.size() == 2);
  for (const RunSpec& r : two) {
    CHECK(r.with_writes);
    CHECK(r.idle == 0.05);
    CHECK(r.replication == "primary");
    CHECK(r.writes == "deferred");
    CHECK(IsAloneRun(r.label));
  }
  CHECK(two[0].routing == "static:1");
  CHECK(two[1].routing == "static:0");
  Workload w;  // the arena holds their new chunks too
  w.chunk_bytes = 4096;
  w.steps = {{{"a"}, {"x", "y"}}};
  CHECK(PlanArena(w, two).bytes == 3 * 4096);
  CHECK(PlanArena(w, PlanAloneRuns({"nvme", "pfs"})).bytes == 4096);
}

TEST_CASE("the arena holds the largest step's reads, and its new chunks only when a run writes") {
  Workload w;
  w.chunk_bytes = 5000;  // slots are rounded up to 4 KiB
  w.steps = {{{"a", "b"}, {"x"}}, {{"c", "d", "e"}, {}}, {{}, {"y", "z", "v", "u"}}};
  CHECK(SlotBytes(5000) == 8192);
  CHECK(SlotBytes(8192) == 8192);
  const RunSpec reads{"completion", "completion"};
  RunSpec writes{"completion+writes:deferred", "completion"};
  writes.with_writes = true;
  const ArenaPlan read_only = PlanArena(w, {reads});
  CHECK(read_only.read_slots == 3);
  CHECK(read_only.bytes == 3 * 8192);
  const ArenaPlan with_writes = PlanArena(w, {reads, writes});
  CHECK(with_writes.read_slots == 3);
  CHECK(with_writes.bytes == (3 + 4) * 8192);
  w.steps = {{{}, {}}};
  CHECK(PlanArena(w, {reads}).read_slots == 1);  // at least one slot
}

// Two tiers at 100 and 50 MB/s alone on one 100 MB step (bound 2/3 s), and the policy runs.
BenchResults HandMadeResults() {
  BenchResults r{"hand-made", 2, 1 << 20, 1, {"t0", "t1"}, {}, "", 0};
  // The daemon spends 0.015 CPU seconds per step: 0.150 s per GB of the 100 MB each run reads.
  auto add = [&](const std::string& label, double seconds, uint64_t t0, uint64_t t1) {
    r.runs.push_back({label, {{seconds, t0 + t1, {t0, t1}, 0.015}}});
  };
  add("only:t0", 1.0, 100'000'000, 0);
  add("only:t1", 2.0, 0, 100'000'000);
  add("completion", 0.8, 60'000'000, 40'000'000);
  add("serial", 1.2, 100'000'000, 0);
  add("completion+idle", 1.0, 50'000'000, 50'000'000);
  add("completion+writes:deferred", 1.6, 50'000'000, 50'000'000);
  return r;
}

// What `print` writes to a stream.
std::string Printed(const std::function<void(std::FILE*)>& print) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  print(out);
  std::fclose(out);
  std::string s(text, size);
  std::free(text);
  return s;
}

TEST_CASE("the report prints each tier alone and together, one table row per run, and reads with writes") {
  const BenchResults results = HandMadeResults();
  const Analysis a = Analyze(results);
  REQUIRE(a.alone.size() == 2);
  CHECK(a.alone[0] == &results.runs[0]);
  CHECK(a.completion == &results.runs[2]);
  CHECK(a.serial == &results.runs[3]);
  CHECK(Printed([&](std::FILE* out) { PrintReport(out, results, a); }) ==
        "1 steps, 95.4 MiB per step on average\n"
        "t0           alone:    100.0 MB/s   together (completion):     75.0 MB/s\n"
        "t1           alone:     50.0 MB/s   together (completion):     50.0 MB/s\n"
        "\n"
        "policy                       total_s   bound_s      MB/s      gap vs_serial cpu_s/GB     t0%     t1%\n"
        "only:t0                        1.000     0.667     100.0   +50.0%     1.20x    0.150  100.0%    0.0%\n"
        "only:t1                        2.000     0.667      50.0  +200.0%     0.60x    0.150    0.0%  100.0%\n"
        "completion                     0.800     0.667     125.0   +20.0%     1.50x    0.150   60.0%   40.0%\n"
        "serial                         1.200     0.667      83.3   +80.0%     1.00x    0.150  100.0%    0.0%\n"
        "completion+idle                1.000     0.667     100.0   +50.0%     1.20x    0.150   50.0%   50.0%\n"
        "completion+writes:deferred     1.600     0.667      62.5  +140.0%     0.75x    0.150   50.0%   50.0%\n"
        "completion+writes:deferred: reads at 0.625 x reads alone (completion+idle), read loss 37.5%\n");
}

TEST_CASE("a run with writes prints its read loss and its persists' median, 95th percentile and longest") {
  BenchResults results = HandMadeResults();
  Run& writes = results.runs.back();
  REQUIRE(writes.label == "completion+writes:deferred");
  for (int i = 20; i >= 1; --i) writes.persist_seconds.push_back(0.1 * i);  // 0.1 .. 2.0 s, out of order
  const std::string printed = Printed([&](std::FILE* out) { PrintReport(out, results, Analyze(results)); });
  CHECK(printed.find("completion+writes:deferred: reads at 0.625 x reads alone (completion+idle), read loss 37.5%; "
                     "persists (call to written) p50 1.000 s, p95 1.900 s, max 2.000 s over 20\n") != std::string::npos);
  const nlohmann::json j = ToJson(results, Analyze(results));
  CHECK(j.at("runs").back().at("persist_seconds").size() == 20);
  CHECK_FALSE(j.at("runs").front().contains("persist_seconds"));
}

// A completion run whose steps were estimated: 1 s each, estimates off by the given fractions.
Run EstimatedRun(const std::vector<double>& errors) {
  Run run{"completion", {}};
  for (double e : errors) {
    StepSample s{1.0, 100'000'000, {60'000'000, 40'000'000}, 0.015};
    s.estimated = true;
    s.estimate_seconds = 1.0 + e;
    run.steps.push_back(s);
  }
  return run;
}

TEST_CASE("a load estimate's error is against the step's time, NaN estimates counted apart") {
  Run run = EstimatedRun({0.05, -0.02, 0.10, -0.30, 0.01, 0.0, -0.04, 0.20, 0.03, -0.01});
  run.steps[2].seconds = 2.0;  // estimate 1.1 s against 2 s: -45%
  run.steps.push_back(run.steps[0]);
  run.steps.back().estimate_seconds = NAN;
  run.steps.push_back(run.steps[0]);
  run.steps.back().estimated = false;  // not asked: neither an error nor unknown
  size_t unknown = 0;
  const std::vector<double> errors = EstimateErrors(run, &unknown);
  REQUIRE(errors.size() == 10);
  CHECK(unknown == 1);
  CHECK(errors[2] == Approx(-0.45));
  const auto e = SummarizeEstimate(run);
  REQUIRE(e.has_value());
  CHECK(e->steps == 10);
  CHECK(e->unknown == 1);
  // |errors| sorted: 0 .01 .01 .02 .03 .04 .05 .2 .3 .45 -> the 5th and the 9th
  CHECK(e->median_abs == Approx(0.03));
  CHECK(e->p90_abs == Approx(0.30));
  // signed, sorted: -.45 -.3 -.04 -.02 -.01 0 .01 .03 .05 .2 -> the 5th
  CHECK(e->median == Approx(-0.01));
  CHECK_FALSE(SummarizeEstimate(HandMadeResults().runs[2]).has_value());
}

TEST_CASE("runs with load estimates print their errors and write them and each step's estimate to the JSON") {
  BenchResults results = HandMadeResults();
  results.runs.push_back(EstimatedRun({0.05, -0.10, NAN}));
  const std::string printed = Printed([&](std::FILE* out) { PrintReport(out, results, Analyze(results)); });
  CHECK(printed.find("\nload estimate (a Lookup with estimate_load over every rank's keys just before each step) "
                     "against the step's time here (release of the ranks to the last reply):\n"
                     "run                         steps  unknown  median|err|   p90|err|     bias\n"
                     "completion                      2        1         5.0%      10.0%   -10.0%\n") !=
        std::string::npos);
  const nlohmann::json j = ToJson(results, Analyze(results));
  const nlohmann::json& estimated = j.at("runs").back();
  CHECK(estimated.at("estimate").at("steps") == 2);
  CHECK(estimated.at("estimate").at("unknown") == 1);
  CHECK(estimated.at("estimate").at("p90_abs_error").get<double>() == Approx(0.10));
  CHECK(estimated.at("steps")[0].at("estimate_seconds").get<double>() == Approx(1.05));
  CHECK(estimated.at("steps")[2].at("estimate_seconds").is_null());  // NaN
  CHECK_FALSE(j.at("runs").front().contains("estimate"));
  CHECK_FALSE(j.at("runs").front().at("steps")[0].contains("estimate_seconds"));
  results.runs.pop_back();
  CHECK(Printed([&](std::FILE* out) { PrintReport(out, results, Analyze(results)); }).find("load estimate") ==
        std::string::npos);
}

TEST_CASE("a percentile is the smallest value with at least that share at or below it") {
  CHECK(Percentile({}, 0.5) == 0);
  CHECK(Percentile({3}, 0.95) == 3);
  CHECK(Percentile({4, 1, 3, 2}, 0.5) == 2);
  CHECK(Percentile({4, 1, 3, 2}, 0.51) == 3);
  CHECK(Percentile({4, 1, 3, 2}, 1) == 4);
}

TEST_CASE("without an alone run per tier there is no bound, and fio is compared with the first tier") {
  BenchResults results = HandMadeResults();
  results.runs.erase(results.runs.begin() + 1);  // only:t1
  results.fio_dir = "/t0";
  results.fio_bps = 200e6;
  const Analysis a = Analyze(results);
  CHECK(a.alone.empty());
  for (const Summary& s : a.summaries) CHECK(s.bound_seconds == 0);
  const std::string printed = Printed([&](std::FILE* out) { PrintReport(out, results, a); });
  CHECK(printed.find("alone:") == std::string::npos);
  CHECK(printed.find("fio on /t0:    200.0 MB/s; t0 through kvstreamd alone = 0.000 x fio\n") != std::string::npos);
  const CheckVerdict v = CheckCompletionGap(a, 0.5);
  CHECK(v.exit_code == 3);
  CHECK(v.to_stderr);
  CHECK(v.message == "kvbench: --check needs the completion policy and the tiers' alone runs");
}

TEST_CASE("a chunk drain per tier is printed and written to the JSON, and no drain is neither") {
  BenchResults results = HandMadeResults();
  const std::string line = "chunk drain (serial batching's idle time per chunk boundary): t0 1.50 ms t1 2.25 ms\n";
  CHECK(Printed([&](std::FILE* out) { PrintReport(out, results, Analyze(results)); }).find("chunk drain") ==
        std::string::npos);
  CHECK_FALSE(ToJson(results, Analyze(results)).contains("chunk_drain_seconds"));
  results.chunk_drain_seconds = {0.0015, 0.00225};
  const Analysis a = Analyze(results);
  CHECK(Printed([&](std::FILE* out) { PrintReport(out, results, a); }).find(line) != std::string::npos);
  CHECK(ToJson(results, a).at("chunk_drain_seconds") == nlohmann::json({0.0015, 0.00225}));
}

TEST_CASE("the --check verdict passes when the completion gap is within the limit and fails with 3 beyond it") {
  const Analysis a = Analyze(HandMadeResults());  // completion's gap: +20%
  const CheckVerdict passed = CheckCompletionGap(a, 0.25);
  CHECK(passed.exit_code == 0);
  CHECK_FALSE(passed.to_stderr);
  CHECK(passed.message == "check passed: completion gap +20.0% <= 25.0%");
  const CheckVerdict failed = CheckCompletionGap(a, 0.03);
  CHECK(failed.exit_code == 3);
  CHECK_FALSE(failed.to_stderr);
  CHECK(failed.message == "check FAILED: completion gap +20.0% > 3.0%");
}

TEST_CASE("the --dry-run text and the first line describe the workload") {
  auto w = Synthetic({2, 3, 4, 0.75, 1 << 20});
  REQUIRE(w.ok());
  CHECK(Printed([&](std::FILE* out) { PrintWorkload(out, *w); }) ==
        "synthetic: 2 steps x 3 requests x 4 chunks (3 stored, 1 new)\n"
        "2 steps; per rank: 18 chunk reads (9.0 MiB per step), 6 new chunks; 18 chunks to populate\n");
  CHECK(Printed([&](std::FILE* out) { PrintHeader(out, *w, 2, {"nvme", "pfs"}); }) ==
        "kvbench: synthetic: 2 steps x 3 requests x 4 chunks (3 stored, 1 new); 2 ranks, 1024 KiB per chunk per "
        "rank, tiers nvme pfs\n");
}

// Numbers within Approx, everything else (keys, strings, array sizes) equal.
void CheckJsonNear(const nlohmann::json& got, const nlohmann::json& want, const std::string& path) {
  INFO(path);
  if (want.is_number()) {
    REQUIRE(got.is_number());
    CHECK(got.get<double>() == Approx(want.get<double>()));
  } else if (want.is_object()) {
    REQUIRE(got.is_object());
    for (const auto& [key, value] : want.items()) CHECK(got.contains(key));
    for (const auto& [key, value] : got.items()) {
      REQUIRE(want.contains(key));
      CheckJsonNear(value, want.at(key), path + "." + key);
    }
  } else if (want.is_array()) {
    REQUIRE(got.is_array());
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CheckJsonNear(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else {
    CHECK(got == want);
  }
}

// Recorded by tools/bench.sh --gbs (tmpfs-backed tiers capped at 2000 and 700 MB/s), with the
// daemon's CPU seconds per step.
TEST_CASE("the JSON document recomputed from a recorded kvbench --json output's samples is that output") {
  std::ifstream in(std::string(KVSTREAM_TEST_DATA) + "/kvbench_gbs_caps.json");
  REQUIRE(in.good());
  const auto recorded = nlohmann::json::parse(in);
  BenchResults results{recorded.at("workload").get<std::string>(), recorded.at("ranks").get<uint32_t>(),
                       recorded.at("chunk_bytes").get<uint64_t>(), recorded.at("steps").get<size_t>(),
                       recorded.at("tiers").get<std::vector<std::string>>(), {}, "", recorded.at("fio_bps").get<double>(),
                       recorded.at("fio_all_bps").get<double>(),
                       recorded.value("chunk_drain_seconds", std::vector<double>{})};
  for (const auto& r : recorded.at("runs")) {
    Run run{r.at("label").get<std::string>(), {}};
    for (const auto& s : r.at("steps")) {
      run.steps.push_back({s.at("seconds").get<double>(), s.at("bytes").get<uint64_t>(),
                           s.at("tier_bytes").get<std::vector<uint64_t>>(), s.at("daemon_cpu_seconds").get<double>()});
    }
    results.runs.push_back(std::move(run));
  }
  CheckJsonNear(ToJson(results, Analyze(results)), recorded, "");
}

}  // namespace
}  // namespace kvbench
