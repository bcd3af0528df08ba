// kvbench: drives a running kvstreamd through the C++ client, as several tensor-parallel rank
// sessions at once, and measures every policy of the daemon on the same steps, side by side,
// against the aggregate-bandwidth bound D / sum_k b_k with each tier's alone bandwidth measured
// in the same run (docs/design.md section 2). Policies are switched at run time (SetPolicies).
//
// Exit codes: 0 done; 1 a daemon call failed (connect, stats, attach, populate, measure); 2 a bad
// size, workload or policy, or a tier reading through the page cache; 3 --check failed; CLI11's
// own codes for options it rejects.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream/client.h"
#include "kvstream/key.h"
#include "kvstream/policies.h"
#include "plan.h"
#include "report.h"
#include "runner.h"
#include "workload.h"

namespace kvbench {
namespace {

// Every command-line option, with its default.
struct Options {
  std::string socket = "/run/kvstream/kvstreamd.sock", workload = "synthetic";
  uint32_t ranks = 2;
  SyntheticOptions synthetic;
  TraceOptions trace;
  std::vector<std::string> fio_all;
  std::string chunk_size = "8MiB", host_cache = "4GiB", json, plot, step_hook, fio_dir, fio_block = "1MiB";
  std::string policies = "completion,static:0.5,static:0.67,fastest,serial";
  std::string write_policies = "deferred,immediate", replications;
  double check = -1;  // negative: no check
  int settle = 3, drain_pairs = 5;
  bool warm_up = false;
  double step_gap = 0, write_gap = 0.3;
  std::string read_into = "arena", key_prefix;
  bool allow_buffered = false, dry_run = false, no_alone = false, no_populate = false, alone_writes = false;
  bool background_writes = false;
  bool estimate = false;
};

void AddOptions(CLI::App& app, Options& o) {
  app.add_option("--socket", o.socket, "kvstreamd's control socket")->capture_default_str();
  app.add_option("--ranks", o.ranks, "tensor-parallel ranks: one session each, reading concurrently")->capture_default_str();
  app.add_option("--workload", o.workload, "synthetic | trace")->capture_default_str();
  app.add_option("--steps", o.synthetic.steps, "synthetic: measured steps")->capture_default_str();
  app.add_option("--requests", o.synthetic.requests, "synthetic: requests per step")->capture_default_str();
  app.add_option("--chunks", o.synthetic.chunks, "synthetic: chunks per request")->capture_default_str();
  app.add_option("--hit-ratio", o.synthetic.hit_ratio, "synthetic: stored fraction of each request's chunks (the rest is new KV)")->capture_default_str();
  app.add_option("--chunk-size", o.chunk_size, "synthetic: bytes per chunk per rank")->capture_default_str();
  app.add_option("--trace", o.trace.path, "trace: a Mooncake-format request trace (JSON lines)");
  app.add_option("--kv-bytes-per-token", o.trace.kv_bytes_per_token, "trace: KV bytes per token (whole node)")->capture_default_str();
  app.add_option("--chunk-tokens", o.trace.chunk_tokens, "trace: tokens per chunk (multiple of 512)")->capture_default_str();
  app.add_option("--host-cache", o.host_cache, "trace: host-memory LRU in front of storage")->capture_default_str();
  app.add_option("--batch", o.trace.batch, "trace: requests per step")->capture_default_str();
  app.add_option("--warmup", o.trace.warmup, "trace: requests that only warm the host cache")->capture_default_str();
  app.add_option("--trace-requests", o.trace.requests, "trace: measured requests at most")->capture_default_str();
  app.add_option("--max-steps", o.trace.max_steps, "trace: measured steps at most")->capture_default_str();
  app.add_option("--policies", o.policies, "comma-separated routing policies (completion, static:<g>, fastest) "
                 "and serial (fastest, chunk after chunk: LMCache-like)")->capture_default_str();
  app.add_option("--replications", o.replications,
                 "comma-separated replication policies (all, primary, adaptive) to compare on runs that read and write "
                 "every step, each against replication:serial (one tier, as single-tier offloading); printed with the "
                 "time until each step's new chunks are written, write amplification and write stall")
      ->capture_default_str();
  app.add_option("--write-policies", o.write_policies, "comma-separated write policies to run with each step's "
                 "new chunks persisted during it (under completion routing); empty: none")->capture_default_str();
  app.add_option("--step-hook", o.step_hook, "shell command run before every measured step, {step} replaced by its index "
                 "(e.g. tierlab cap --dir D t1 periodic:150:50:4 --at {step})");
  app.add_option("--fio", o.fio_dir, "also measure fio on this directory (the first tier's), same block size and depth");
  app.add_option("--fio-all", o.fio_all, "also measure fio reading these directories (every tier's) at once, one job each")
      ->delimiter(',');
  app.add_option("--fio-block", o.fio_block, "fio's block size: the daemon's block_size")->capture_default_str();
  app.add_option("--settle", o.settle, "seconds to wait after populating, before timing")->capture_default_str();
  app.add_flag("--warm-up", o.warm_up,
               "before each run, read every step once under its policies, untimed: each run starts from its own "
               "steady state, not the one the run before left (on blkio-capped tiers a policy that left a tier idle "
               "gives the next run about a run's worth of credit)");
  app.add_option("--step-gap", o.step_gap, "idle seconds before every step of the policy runs (0: back to back)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--write-gap", o.write_gap, "idle seconds before every step of the runs with writes (the forward pass, "
                 "during which deferred writes drain), and of their reads-only reference run completion+idle")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--background-writes", o.background_writes,
               "the runs with writes do not wait for a step's new chunks to be written: each step's persists go on "
               "in the background while the next steps read (with --write-gap 0, reads that never pause); the "
               "report gives each run's persist times (call to written) and its read loss against completion+idle");
  app.add_flag("--estimate", o.estimate,
               "before each measured step, ask the daemon's load estimate (one Lookup with estimate_load over every "
               "rank's keys of the step, as a client would before retrieving) and report, per run, its error against "
               "the step's time measured here (release of the ranks to the last reply): median and 90th percentile of "
               "|estimate - time| / time and the median signed error");
  app.add_option("--json", o.json, "write the results as JSON to this file");
  app.add_option("--plot", o.plot, "write a PNG plot (per-step time vs bound, tier share) to this file");
  app.add_option("--check", o.check, "exit 3 if the completion policy's gap exceeds this (e.g. 0.03)");
  app.add_option("--read-into", o.read_into, "arena | region | pinned-region: read into each session's arena, or into a "
                 "client region (an unsealed /dev/shm file the daemon reaches through its descriptor, as an engine's own "
                 "pool), added as device-pinned for pinned-region (reads through the daemon's bounce buffers)")
      ->check(CLI::IsMember({"arena", "region", "pinned-region"}))
      ->capture_default_str();
  app.add_option("--key-prefix", o.key_prefix, "put this in front of every chunk key (several benches on one shared tier: "
                 "keys of their own, or the same keys on purpose)");
  app.add_flag("--no-alone", o.no_alone, "skip the runs that read each tier alone (no bound is computed): when other "
               "processes load the tiers meanwhile, or when the first run must be a policy run");
  app.add_flag("--alone-writes", o.alone_writes, "the only:<tier> runs also persist each step's new chunks (on the first "
               "tier, deferred, --write-gap idle): the bound and kvsim --validate's references then carry the same "
               "staging work and idle time as the runs with writes");
  app.add_option("--drain-probe", o.drain_pairs, "with a serial run and the alone runs: measure how long each tier idles "
                 "between two chunks read one after another (serial batching less step batching on the first step's "
                 "first 4 chunks per rank, each read after 0.2 s idle, this many pairs, the median; reported and "
                 "written to the JSON for kvsim --validate); 0: not measured")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--no-populate", o.no_populate, "do not store the chunks first: they must be stored already (by an earlier "
               "run, or by another node on a shared tier); a chunk that misses fails its step. Populated or not, the chunks the "
               "steps read are locked against capacity eviction until kvbench exits (at most an hour)");
  app.add_flag("--allow-buffered", o.allow_buffered, "run even when a tier falls back to buffered I/O (page cache)");
  app.add_flag("--dry-run", o.dry_run, "print the workload (steps, bytes, host/storage/new chunks) and exit");
}

// Prints "kvbench: <message>" on stderr and returns `exit_code`.
int Fail(const absl::Status& s, int exit_code) {
  std::cerr << "kvbench: " << s.message() << "\n";
  return exit_code;
}
int Fail(const std::string& what, const absl::Status& s, int exit_code) {
  return Fail(absl::Status(s.code(), what + ": " + std::string(s.message())), exit_code);
}

// The options given as sizes (with units), parsed.
struct Sizes {
  uint64_t chunk = 0, host_cache = 0, fio_block = 0;
};
absl::StatusOr<Sizes> ParseSizes(const Options& o) {
  auto chunk = kvstream::ParseBytes(o.chunk_size);
  auto host = kvstream::ParseBytes(o.host_cache);
  auto fio_block = kvstream::ParseBytes(o.fio_block);
  for (const auto* size : {&chunk, &host, &fio_block}) {
    if (!size->ok()) return size->status();
  }
  return Sizes{*chunk, *host, *fio_block};
}

// The workload --workload names, built from its options.
absl::StatusOr<Workload> MakeWorkload(const Options& o, const Sizes& sizes) {
  if (o.workload == "trace") {
    TraceOptions trace = o.trace;
    trace.host_cache_bytes = sizes.host_cache;
    trace.ranks = o.ranks;
    return FromTrace(trace);
  }
  if (o.workload == "synthetic") {
    SyntheticOptions synthetic = o.synthetic;
    synthetic.chunk_bytes = sizes.chunk;
    return Synthetic(synthetic);
  }
  return absl::InvalidArgumentError("--workload is synthetic or trace");
}

std::vector<std::string> TierNames(const kvstream::StoreStats& stats) {
  std::vector<std::string> names;
  for (const auto& t : stats.tiers) names.push_back(t.name);
  return names;
}

// Each tier alone (when the bound can be measured and `alone`), then the policy runs.
std::vector<RunSpec> AllRuns(const std::vector<std::string>& tiers, const std::vector<RunSpec>& policy_runs, bool alone,
                             bool alone_writes, double write_gap) {
  if (!alone) return policy_runs;
  std::vector<RunSpec> runs = PlanAloneRuns(tiers, alone_writes, write_gap);
  if (runs.empty()) std::cerr << "kvbench: bounds are measured for one or two tiers; the daemon has " << tiers.size() << "\n";
  runs.insert(runs.end(), policy_runs.begin(), policy_runs.end());
  return runs;
}

// Chunks per rank of the chunk drain probe (Bench::MeasureChunkDrains).
constexpr size_t kDrainProbeChunks = 4;

// The alone runs whose tiers the chunk drain probe measures: all of them when a run reads chunk
// after chunk (serial batching), none otherwise (the probe would not be worth its time).
std::vector<RunSpec> ChunkDrainRuns(const std::vector<RunSpec>& runs) {
  std::vector<RunSpec> alone;
  bool serial = false;
  for (const RunSpec& r : runs) {
    if (IsAloneRun(r.label)) alone.push_back(r);
    serial |= r.batching == "serial";
  }
  return serial ? alone : std::vector<RunSpec>{};
}

// fio on the directories at once at the first tier's queue depth, when asked for; 0 otherwise.
double MeasureFio(const std::vector<std::string>& dirs, const Sizes& sizes, const kvstream::StoreStats& stats) {
  if (dirs.empty()) return 0;
  const double bps = FioBandwidth(dirs, sizes.fio_block, stats.tiers[0].queue_depth);
  if (bps == 0) std::fprintf(stderr, "kvbench: fio failed or is not installed\n");
  return bps;
}

int Main(int argc, char** argv) {
  CLI::App app{"kvbench: every policy of a running kvstreamd on the same steps, side by side, against the "
               "aggregate-bandwidth bound measured in the same run"};
  Options o;
  AddOptions(app, o);
  CLI11_PARSE(app, argc, argv);

  // Plan: the workload and the policy runs, before touching the daemon.
  auto sizes = ParseSizes(o);
  if (!sizes.ok()) return Fail("bad size", sizes.status(), 2);
  auto workload = MakeWorkload(o, *sizes);
  if (!workload.ok()) return Fail("workload", workload.status(), 2);
  if (!o.key_prefix.empty()) {
    if (absl::Status s = kvstream::ValidateKey(o.key_prefix); !s.ok()) return Fail("--key-prefix", s, 2);
    PrefixKeys(&*workload, o.key_prefix);
  }
  if (o.dry_run) return PrintWorkload(stdout, *workload), 0;
  auto policy_runs = PlanPolicyRuns(o.policies, o.write_policies, o.step_gap, o.write_gap);
  if (!policy_runs.ok()) return Fail(policy_runs.status(), 2);
  auto replication_runs = PlanReplicationRuns(o.replications, o.write_gap);
  if (!replication_runs.ok()) return Fail(replication_runs.status(), 2);
  policy_runs->insert(policy_runs->end(), replication_runs->begin(), replication_runs->end());
  for (RunSpec& r : *policy_runs) r.background_writes = r.with_writes && o.background_writes;

  // Connect: the daemon's tiers complete the plan and size the rank sessions' arenas.
  auto control = kvstream::Client::Connect(o.socket);
  if (!control.ok()) return Fail("connect", control.status(), 1);
  auto stats = (*control)->Stats();
  if (!stats.ok()) return Fail("stats", stats.status(), 1);
  if (absl::Status s = RequireDirectIo(*stats, o.allow_buffered); !s.ok()) return Fail(s, 2);
  const std::vector<std::string> tiers = TierNames(*stats);
  const std::vector<RunSpec> runs = AllRuns(tiers, *policy_runs, !o.no_alone, o.alone_writes, o.write_gap);
  const ArenaPlan arena = PlanArena(*workload, runs);
  auto sessions = AttachRanks(o.socket, o.ranks, arena.bytes);
  if (!sessions.ok()) return Fail(sessions.status(), 1);
  PrintHeader(stdout, *workload, o.ranks, tiers);

  // Populate, let the tiers settle, then measure every run.
  Bench bench(*std::move(sessions), control->get(), *std::move(workload), arena.read_slots);
  if (absl::Status s = o.no_populate ? bench.LockReadChunks() : bench.Populate(); !s.ok()) {
    return Fail(o.no_populate ? "lock" : "populate", s, 1);
  }
  if (o.read_into != "arena") {
    if (absl::Status s = bench.ReadIntoClientRegions(o.read_into == "pinned-region"); !s.ok()) {
      return Fail("client regions", s, 1);
    }
  }
  bench.WarmUpEachRun(o.warm_up);
  bench.EstimateEachStep(o.estimate);
  sync();
  std::this_thread::sleep_for(std::chrono::seconds(o.settle));
  std::vector<double> drains;
  if (const std::vector<RunSpec> probed = ChunkDrainRuns(runs); o.drain_pairs > 0 && !probed.empty()) {
    auto d = bench.MeasureChunkDrains(probed, kDrainProbeChunks, o.drain_pairs, stats->policies);
    if (!d.ok()) return Fail("chunk drain probe", d.status(), 1);
    drains = *std::move(d);
    if (drains.empty()) std::cerr << "kvbench: chunk drain not measured: the first step reads fewer than two chunks\n";
  }
  auto measured = bench.MeasureAll(runs, ShellStepHook(o.step_hook), stats->policies);
  if (!measured.ok()) return Fail("measure", measured.status(), 1);

  // Report.
  const Workload& w = bench.workload();
  const BenchResults results{w.description, o.ranks, w.chunk_bytes, w.steps.size(), tiers,
                             *std::move(measured), o.fio_dir,
                             MeasureFio(o.fio_dir.empty() ? std::vector<std::string>{} : std::vector{o.fio_dir}, *sizes, *stats),
                             MeasureFio(o.fio_all, *sizes, *stats), std::move(drains)};
  const Analysis analysis = Analyze(results);
  PrintReport(stdout, results, analysis);
  if (!o.json.empty()) std::ofstream(o.json) << ToJson(results, analysis).dump(2) << "\n";
  if (!o.plot.empty()) Plot(o.plot, results, analysis);
  return o.check >= 0 ? Emit(CheckCompletionGap(analysis, o.check)) : 0;
}

}  // namespace
}  // namespace kvbench

int main(int argc, char** argv) { return kvbench::Main(argc, argv); }
