// kvbench: drives a running kvstreamd through the C++ client, as several tensor-parallel rank
// sessions at once, and measures every policy of the daemon on the same steps, side by side,
// against the aggregate-bandwidth bound D / sum_k b_k with each tier's alone bandwidth measured
// in the same run (DESIGN.md section 2). Policies are switched at run time (SetPolicies).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench_math.h"
#include "kvstream/client.h"
#include "workload.h"
#include "xxhash.h"

namespace kvbench {
namespace {

using kvstream::ArenaChunk;
using kvstream::Client;

constexpr uint64_t kSlotAlign = 4096;

// A run: one policy setting of the daemon, over every step of the workload.
struct RunSpec {
  std::string label;
  std::string routing, batching = "step", writes = "deferred";
  bool with_writes = false;  // also persist each step's new chunks during it
  // Seconds without reads before every step (the forward pass), counted from the end of the
  // previous step's reads; with writes, a step also waits until the previous one's are durable.
  double idle = 0;
};

// The first 8 bytes of every populated chunk: a tag derived from its key, so a step can check
// that each rank got the chunk it asked for (the daemon checks the bytes' checksums itself).
uint64_t Tag(const std::string& key) { return XXH3_64bits(key.data(), key.size()); }

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

uint64_t SlotBytes(uint64_t chunk) { return (chunk + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

class Bench {
 public:
  Bench(std::vector<std::unique_ptr<Client>> ranks, Client* control, Workload workload, size_t read_slots)
      : ranks_(std::move(ranks)), control_(control), w_(std::move(workload)), read_slots_(read_slots) {}

  // Stores every chunk the steps read, on every tier, skipping those already there.
  absl::Status Populate() {
    auto stats = control_->Stats();
    if (!stats.ok()) return stats.status();
    const uint32_t all = (1u << stats->tiers.size()) - 1;
    const size_t batch = (ranks_[0]->arena_size()) / SlotBytes(w_.chunk_bytes);
    std::atomic<uint64_t> written{0};
    std::vector<absl::Status> status(ranks_.size());
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      threads.emplace_back([&, r] {
        Client& c = *ranks_[r];
        std::vector<std::string> keys;
        for (const std::string& id : w_.populate) keys.push_back(RankKey(id, r));
        auto present = c.Lookup(keys);
        if (!present.ok()) {
          status[r] = present.status();
          return;
        }
        std::vector<ArenaChunk> pending;
        auto flush = [&] {
          if (pending.empty()) return absl::OkStatus();
          std::vector<kvstream::PersistResult> results;
          absl::Status s = c.Persist(pending, &results);
          for (const auto& res : results) {
            if (s.ok() && !res.status.ok()) s = res.status;
          }
          written += pending.size();
          pending.clear();
          return s;
        };
        for (size_t i = 0; i < keys.size() && status[r].ok(); ++i) {
          const auto& p = (*present)[i];
          if (p.present && p.tier_mask == all && p.size == w_.chunk_bytes) continue;
          const uint64_t offset = pending.size() * SlotBytes(w_.chunk_bytes);
          uint8_t* dst = c.arena() + offset;
          uint64_t x = Tag(keys[i]);
          for (uint64_t b = 0; b + 8 <= w_.chunk_bytes; b += 8) {
            std::memcpy(dst + b, &x, 8);
            x = x * 6364136223846793005ull + 1442695040888963407ull;
          }
          pending.push_back({keys[i], offset, w_.chunk_bytes});
          if (pending.size() == batch) status[r] = flush();
        }
        if (status[r].ok()) status[r] = flush();
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : status) {
      if (!s.ok()) return s;
    }
    std::fprintf(stderr, "kvbench: populated %llu chunk parts (%zu chunks x %zu ranks needed)\n",
                 static_cast<unsigned long long>(written.load()), w_.populate.size(), ranks_.size());
    return absl::OkStatus();
  }

  // Runs every step under `spec`; `hook` runs before each step with its index.
  absl::StatusOr<Run> Measure(const RunSpec& spec, const std::function<void(size_t)>& hook) {
    auto policies = control_->SetPolicies(spec.routing, spec.batching, spec.writes);
    if (!policies.ok()) return policies.status();
    Run run;
    run.label = spec.label;
    double previous_end = Now();
    for (size_t s = 0; s < w_.steps.size(); ++s) {
      if (hook) hook(s);
      const double idle = previous_end + spec.idle - Now();
      if (idle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idle));
      const BenchStep& step = w_.steps[s];
      auto before = control_->Stats();
      if (!before.ok()) return before.status();
      std::vector<absl::Status> status(ranks_.size());
      std::vector<double> done(ranks_.size(), 0);
      std::vector<std::thread> threads, writers;
      std::atomic<bool> go{false};
      for (uint32_t r = 0; r < ranks_.size(); ++r) {
        threads.emplace_back([&, r] {
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          status[r] = ReadStep(r, step);
          done[r] = Now();
        });
        if (spec.with_writes && !step.writes.empty()) {
          writers.emplace_back([&, r] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            WriteStep(r, step);
          });
        }
      }
      const double start = Now();
      go.store(true, std::memory_order_release);
      for (auto& t : threads) t.join();
      double end = start;
      for (double d : done) end = std::max(end, d);
      for (auto& t : writers) t.join();  // the forward pass: deferred writes drain here
      previous_end = end;
      for (const absl::Status& st : status) {
        if (!st.ok()) return absl::Status(st.code(), absl::StrCat(spec.label, " step ", s, ": ", st.message()));
      }
      auto after = control_->Stats();
      if (!after.ok()) return after.status();
      StepSample sample;
      sample.seconds = end - start;
      sample.bytes = step.reads.size() * ranks_.size() * w_.chunk_bytes;
      for (size_t t = 0; t < after->tiers.size(); ++t) {
        sample.tier_bytes.push_back(after->tiers[t].bytes_read - before->tiers[t].bytes_read);
      }
      run.steps.push_back(std::move(sample));
    }
    return run;
  }

  const Workload& workload() const { return w_; }

 private:
  absl::Status ReadStep(uint32_t r, const BenchStep& step) {
    Client& c = *ranks_[r];
    const uint64_t slot = SlotBytes(w_.chunk_bytes);
    std::vector<ArenaChunk> chunks;
    for (size_t i = 0; i < step.reads.size(); ++i) chunks.push_back({RankKey(step.reads[i], r), i * slot, slot});
    std::vector<kvstream::ChunkResult> results;
    auto rec = c.Retrieve(chunks, &results);
    if (!rec.ok()) return rec.status();
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].status.ok()) return absl::Status(results[i].status.code(), chunks[i].key + ": " + std::string(results[i].status.message()));
      uint64_t tag;
      std::memcpy(&tag, c.arena() + chunks[i].offset, 8);
      if (results[i].size != w_.chunk_bytes || tag != Tag(chunks[i].key)) {
        return absl::DataLossError(chunks[i].key + ": wrong size or content");
      }
    }
    return absl::OkStatus();
  }

  // New KV of the step from the arena slots after the read slots (content is not checked).
  void WriteStep(uint32_t r, const BenchStep& step) {
    Client& c = *ranks_[r];
    const uint64_t slot = SlotBytes(w_.chunk_bytes);
    std::vector<ArenaChunk> chunks;
    for (size_t i = 0; i < step.writes.size(); ++i) {
      chunks.push_back({RankKey(step.writes[i], r), (read_slots_ + i) * slot, w_.chunk_bytes});
    }
    if (absl::Status s = c.Persist(chunks); !s.ok()) std::fprintf(stderr, "kvbench: persist: %s\n", std::string(s.message()).c_str());
  }

  std::vector<std::unique_ptr<Client>> ranks_;
  Client* control_;
  Workload w_;
  size_t read_slots_;
};

// fio on one tier's chunk files (O_DIRECT, io_uring, same block size and depth): the reference
// for "one tier through the daemon". Returns bytes/s, or 0 when fio is unavailable or fails.
double FioBandwidth(const std::string& dir, uint64_t block, uint32_t depth) {
  const std::string out = "/tmp/kvbench-fio-" + std::to_string(getpid()) + ".json";
  const std::string cmd = absl::StrCat("fio --name=ref --opendir=", dir, " --rw=read --bs=", block, " --iodepth=", depth,
                                       " --ioengine=io_uring --direct=1 --readonly --output-format=json --output=", out,
                                       " > /dev/null 2>&1");
  if (std::system(cmd.c_str()) != 0) return 0;
  try {
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::remove(out.c_str());
    // fio prints notes ("file ... may be ignored") before the JSON document.
    const size_t start = text.find('{');
    if (start == std::string::npos) return 0;
    nlohmann::json j = nlohmann::json::parse(text.substr(start));
    return j.at("jobs").at(0).at("read").at("bw_bytes").get<double>();
  } catch (const std::exception&) {
    return 0;
  }
}

nlohmann::json RunJson(const Run& run, const Summary& s, const std::vector<double>& bounds) {
  nlohmann::json j = {{"label", s.label}, {"total_seconds", s.total_seconds}, {"bytes", s.bytes},
                      {"bound_seconds", s.bound_seconds}, {"gap", s.gap}, {"speedup_vs_serial", s.speedup_vs_serial},
                      {"throughput_bps", s.throughput_bps}, {"tier_share", s.tier_share}, {"steps", nlohmann::json::array()}};
  for (size_t i = 0; i < run.steps.size(); ++i) {
    j["steps"].push_back({{"seconds", run.steps[i].seconds}, {"bytes", run.steps[i].bytes},
                          {"tier_bytes", run.steps[i].tier_bytes}, {"bound_seconds", bounds[i]}});
  }
  return j;
}

// Per-step time vs bound and tier-0 share per step, one line per run, rendered by gnuplot.
void Plot(const std::string& png, const std::vector<Run>& runs, const std::vector<const Run*>& alone,
          const std::vector<std::string>& tier_names) {
  const std::string data = png + ".dat", script = png + ".gp";
  std::ofstream d(data);
  std::vector<std::string> plotted;
  for (const Run& run : runs) {
    if (run.label.rfind("only:", 0) == 0) continue;
    const auto bounds = StepBounds(run, alone);
    d << "# " << run.label << "\n";
    for (size_t i = 0; i < run.steps.size(); ++i) {
      const auto& st = run.steps[i];
      uint64_t read = 0;
      for (uint64_t b : st.tier_bytes) read += b;
      d << i << " " << st.seconds << " " << bounds[i] << " " << (read ? 100.0 * st.tier_bytes[0] / read : 0) << "\n";
    }
    d << "\n\n";
    plotted.push_back(run.label);
  }
  d.close();
  std::ofstream g(script);
  g << "set terminal png size 1200,900\nset output '" << png << "'\nset multiplot layout 2,1\n"
    << "set title 'retrieval time per step vs the aggregate-bandwidth bound'\nset xlabel 'step'\n"
    << "set ylabel 'seconds'\nset key outside right\nset xtics 1\nplot ";
  for (size_t i = 0; i < plotted.size(); ++i) {
    g << "'" << data << "' index " << i << " using 1:2 with linespoints title '" << plotted[i] << "', ";
  }
  g << "'" << data << "' index 0 using 1:3 with lines lw 3 dt 2 lc rgb 'black' title 'bound'\n";
  g << "set title 'share of bytes read from " << tier_names[0] << " per step'\nset ylabel '%'\nset yrange [0:100]\nplot ";
  for (size_t i = 0; i < plotted.size(); ++i) {
    g << (i ? ", " : "") << "'" << data << "' index " << i << " using 1:4 with linespoints title '" << plotted[i] << "'";
  }
  g << "\nunset multiplot\n";
  g.close();
  if (std::system(("gnuplot '" + script + "' 2>/dev/null").c_str()) != 0) {
    std::fprintf(stderr, "kvbench: gnuplot failed; data and script are %s and %s\n", data.c_str(), script.c_str());
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"kvbench: every policy of a running kvstreamd on the same steps, side by side, against the "
               "aggregate-bandwidth bound measured in the same run"};
  std::string socket = "/run/kvstream/kvstreamd.sock", workload_kind = "synthetic";
  uint32_t ranks = 2;
  SyntheticOptions syn;
  TraceOptions tr;
  std::string chunk_text = "8MiB", host_text = "4GiB", json_path, plot_path, hook, fio_dir;
  std::string policies_text = "completion,static:0.5,static:0.67,fastest,serial";
  std::string write_policies_text = "deferred,immediate";
  double check = -1;
  int settle = 3;
  double step_gap = 0, write_gap = 0.3;
  bool allow_buffered = false, dry_run = false;
  app.add_option("--socket", socket, "kvstreamd's control socket")->capture_default_str();
  app.add_option("--ranks", ranks, "tensor-parallel ranks: one session each, reading concurrently")->capture_default_str();
  app.add_option("--workload", workload_kind, "synthetic | trace")->capture_default_str();
  app.add_option("--steps", syn.steps, "synthetic: measured steps")->capture_default_str();
  app.add_option("--requests", syn.requests, "synthetic: requests per step")->capture_default_str();
  app.add_option("--chunks", syn.chunks, "synthetic: chunks per request")->capture_default_str();
  app.add_option("--hit-ratio", syn.hit_ratio, "synthetic: stored fraction of each request's chunks (the rest is new KV)")->capture_default_str();
  app.add_option("--chunk-size", chunk_text, "synthetic: bytes per chunk per rank")->capture_default_str();
  app.add_option("--trace", tr.path, "trace: a Mooncake-format request trace (JSON lines)");
  app.add_option("--kv-bytes-per-token", tr.kv_bytes_per_token, "trace: KV bytes per token (whole node)")->capture_default_str();
  app.add_option("--chunk-tokens", tr.chunk_tokens, "trace: tokens per chunk (multiple of 512)")->capture_default_str();
  app.add_option("--host-cache", host_text, "trace: host-memory LRU in front of storage")->capture_default_str();
  app.add_option("--batch", tr.batch, "trace: requests per step")->capture_default_str();
  app.add_option("--warmup", tr.warmup, "trace: requests that only warm the host cache")->capture_default_str();
  app.add_option("--trace-requests", tr.requests, "trace: measured requests at most")->capture_default_str();
  app.add_option("--max-steps", tr.max_steps, "trace: measured steps at most")->capture_default_str();
  app.add_option("--policies", policies_text, "comma-separated routing policies (completion, static:<g>, fastest) "
                 "and serial (fastest, chunk after chunk: LMCache-like)")->capture_default_str();
  app.add_option("--write-policies", write_policies_text, "comma-separated write policies to run with each step's "
                 "new chunks persisted during it (under completion routing); empty: none")->capture_default_str();
  app.add_option("--step-hook", hook, "shell command run before every measured step, {step} replaced by its index "
                 "(e.g. tierlab cap --dir D t1 periodic:150:50:4 --at {step})");
  app.add_option("--fio", fio_dir, "also measure fio on this directory (the first tier's), same block size and depth");
  std::string fio_block_text = "1MiB";
  app.add_option("--fio-block", fio_block_text, "fio's block size: the daemon's block_size")->capture_default_str();
  app.add_option("--settle", settle, "seconds to wait after populating, before timing")->capture_default_str();
  app.add_option("--step-gap", step_gap, "idle seconds before every step of the policy runs (0: back to back)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--write-gap", write_gap, "idle seconds before every step of the runs with writes (the forward pass, "
                 "during which deferred writes drain), and of their reads-only reference run completion+idle")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_option("--plot", plot_path, "write a PNG plot (per-step time vs bound, tier share) to this file");
  app.add_option("--check", check, "exit 3 if the completion policy's gap exceeds this (e.g. 0.03)");
  app.add_flag("--allow-buffered", allow_buffered, "run even when a tier falls back to buffered I/O (page cache)");
  app.add_flag("--dry-run", dry_run, "print the workload (steps, bytes, host/storage/new chunks) and exit");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const std::string& what, const absl::Status& s) {
    std::cerr << "kvbench: " << what << ": " << s.message() << "\n";
    return 1;
  };
  auto chunk = kvstream::ParseBytes(chunk_text);
  auto host = kvstream::ParseBytes(host_text);
  auto fio_block = kvstream::ParseBytes(fio_block_text);
  for (const auto* size : {&chunk, &host, &fio_block}) {
    if (!size->ok()) return fail("bad size", size->status()), 2;
  }
  syn.chunk_bytes = *chunk;
  tr.host_cache_bytes = *host;
  tr.ranks = ranks;
  absl::StatusOr<Workload> workload = workload_kind == "trace" ? FromTrace(tr)
                                      : workload_kind == "synthetic"
                                          ? Synthetic(syn)
                                          : absl::InvalidArgumentError("--workload is synthetic or trace");
  if (!workload.ok()) return fail("workload", workload.status()), 2;
  if (dry_run) {
    uint64_t reads = 0, writes = 0;
    for (const BenchStep& s : workload->steps) {
      reads += s.reads.size();
      writes += s.writes.size();
    }
    std::printf("%s\n%zu steps; per rank: %llu chunk reads (%.1f MiB per step), %llu new chunks; %zu chunks to populate\n",
                workload->description.c_str(), workload->steps.size(), static_cast<unsigned long long>(reads),
                reads * workload->chunk_bytes / 1048576.0 / workload->steps.size(), static_cast<unsigned long long>(writes),
                workload->populate.size());
    return 0;
  }
  std::vector<RunSpec> specs;
  for (const std::string& p : std::vector<std::string>(absl::StrSplit(policies_text, ',', absl::SkipEmpty()))) {
    if (p == "serial") {
      specs.push_back({p, "fastest", "serial", "deferred", false, step_gap});
    } else if (auto r = kvstream::ParseRouting(p); r.ok()) {
      specs.push_back({p, p, "step", "deferred", false, step_gap});
    } else {
      return fail("--policies", r.status()), 2;
    }
  }
  const std::vector<std::string> write_policies = absl::StrSplit(write_policies_text, ',', absl::SkipEmpty());
  if (!write_policies.empty()) {
    // The reference for "reads with writes": the same reads with the same idle time between steps
    // and no writes (an idle device and its throttle behave differently from a busy one).
    specs.push_back({"completion+idle", "completion", "step", "deferred", false, write_gap});
  }
  for (const std::string& w : write_policies) {
    if (auto s = kvstream::ParseWrites(w); !s.ok()) return fail("--write-policies", s.status()), 2;
    specs.push_back({"completion+writes:" + w, "completion", "step", w, true, write_gap});
  }

  auto control = Client::Connect(socket);
  if (!control.ok()) return fail("connect", control.status());
  auto stats = (*control)->Stats();
  if (!stats.ok()) return fail("stats", stats.status());
  std::vector<std::string> tier_names;
  for (const auto& t : stats->tiers) {
    tier_names.push_back(t.name);
    if (!t.direct_io && !allow_buffered) {
      std::cerr << "kvbench: tier " << t.name << " uses buffered I/O: the page cache would serve reads "
                << "(use O_DIRECT-capable tiers, or --allow-buffered)\n";
      return 2;
    }
  }
  const kvstream::Policies initial = stats->policies;
  // Each tier alone: static:1 puts every block on the first tier, static:0 on the second.
  std::vector<RunSpec> runs;
  if (tier_names.size() == 2) {
    runs.push_back({"only:" + tier_names[0], "static:1"});
    runs.push_back({"only:" + tier_names[1], "static:0"});
  } else if (tier_names.size() == 1) {
    runs.push_back({"only:" + tier_names[0], "completion"});
  } else {
    std::cerr << "kvbench: bounds are measured for one or two tiers; the daemon has " << tier_names.size() << "\n";
  }
  runs.insert(runs.end(), specs.begin(), specs.end());

  size_t max_reads = 1, max_writes = 0;
  for (const BenchStep& s : workload->steps) {
    max_reads = std::max(max_reads, s.reads.size());
    max_writes = std::max(max_writes, s.writes.size());
  }
  bool any_writes = false;
  for (const RunSpec& s : runs) any_writes |= s.with_writes;
  const uint64_t arena = SlotBytes(workload->chunk_bytes) * (max_reads + (any_writes ? max_writes : 0));
  std::vector<std::unique_ptr<Client>> sessions;
  for (uint32_t r = 0; r < ranks; ++r) {
    auto c = Client::Attach(socket, {"kvbench", r, ranks, arena});
    if (!c.ok()) return fail(absl::StrCat("attach rank ", r, " (arena ", arena >> 20, " MiB)"), c.status());
    sessions.push_back(*std::move(c));
  }
  std::printf("kvbench: %s; %u ranks, %llu KiB per chunk per rank, tiers", workload->description.c_str(), ranks,
              static_cast<unsigned long long>(workload->chunk_bytes >> 10));
  for (const auto& n : tier_names) std::printf(" %s", n.c_str());
  std::printf("\n");
  std::fflush(stdout);
  Bench bench(std::move(sessions), control->get(), *std::move(workload), max_reads);
  if (absl::Status s = bench.Populate(); !s.ok()) return fail("populate", s);
  sync();
  std::this_thread::sleep_for(std::chrono::seconds(settle));

  std::function<void(size_t)> step_hook;
  if (!hook.empty()) {
    step_hook = [&](size_t step) {
      const std::string cmd = absl::StrReplaceAll(hook, {{"{step}", std::to_string(step)}});
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "kvbench: step hook failed: %s\n", cmd.c_str());
    };
  }
  auto restore = [&] {  // leave the daemon with the policies it had
    auto p = (*control)->SetPolicies(kvstream::ToString(initial.routing), std::string(kvstream::ToString(initial.batching)),
                                     std::string(kvstream::ToString(initial.writes)));
    if (!p.ok()) std::fprintf(stderr, "kvbench: could not restore the policies: %s\n", std::string(p.status().message()).c_str());
  };
  std::vector<Run> results;
  for (const RunSpec& spec : runs) {
    auto run = bench.Measure(spec, step_hook);
    if (!run.ok()) {
      restore();
      return fail("measure", run.status());
    }
    std::fprintf(stderr, "kvbench: %-24s %.3f s\n", spec.label.c_str(), [&] {
      double t = 0;
      for (const auto& s : run->steps) t += s.seconds;
      return t;
    }());
    results.push_back(*std::move(run));
  }
  restore();
  double fio_bps = 0;
  if (!fio_dir.empty()) {
    fio_bps = FioBandwidth(fio_dir, *fio_block, stats->tiers[0].queue_depth);
    if (fio_bps == 0) std::fprintf(stderr, "kvbench: fio failed or is not installed\n");
  }

  std::vector<const Run*> alone;
  const Run* serial = nullptr;
  for (const Run& r : results) {
    if (r.label.rfind("only:", 0) == 0) alone.push_back(&r);
    if (r.label == "serial") serial = &r;
  }
  if (alone.size() != tier_names.size()) alone.clear();
  const Workload& w = bench.workload();
  uint64_t step_bytes = 0;
  for (const auto& s : results[0].steps) step_bytes += s.bytes;
  std::printf("%zu steps, %.1f MiB per step on average\n", w.steps.size(), step_bytes / 1048576.0 / w.steps.size());
  // Together: each tier's bytes over the completion run's time (both tiers busy all the step).
  const Run* completion = nullptr;
  for (const Run& r : results) {
    if (r.label == "completion") completion = &r;
  }
  for (size_t t = 0; t < alone.size(); ++t) {
    std::printf("%-12s alone: %8.1f MB/s", tier_names[t].c_str(), Bandwidth(*alone[t]) / 1e6);
    if (completion) {
      const Summary c = Summarize(*completion, alone, nullptr);
      std::printf("   together (completion): %8.1f MB/s", c.tier_share[t] * c.throughput_bps / 1e6);
    }
    std::printf("\n");
  }
  if (fio_bps > 0) {
    std::printf("fio on %s: %8.1f MB/s; %s through kvstreamd alone = %.3f x fio\n", fio_dir.c_str(), fio_bps / 1e6,
                tier_names[0].c_str(), alone.empty() ? 0 : Bandwidth(*alone[0]) / fio_bps);
  }
  std::printf("\n%-26s %9s %9s %9s %8s %9s", "policy", "total_s", "bound_s", "MB/s", "gap", "vs_serial");
  for (const auto& n : tier_names) std::printf(" %7s", (n + "%").c_str());
  std::printf("\n");
  nlohmann::json out = {{"workload", w.description}, {"ranks", ranks}, {"chunk_bytes", w.chunk_bytes},
                        {"steps", w.steps.size()}, {"tiers", tier_names}, {"fio_bps", fio_bps}, {"runs", nlohmann::json::array()}};
  double completion_gap = 0, reads_alone = 0;
  bool have_completion_gap = false;
  for (const Run& r : results) {
    const Summary s = Summarize(r, alone, serial);
    std::printf("%-26s %9.3f %9.3f %9.1f %+7.1f%% %8.2fx", s.label.c_str(), s.total_seconds, s.bound_seconds,
                s.throughput_bps / 1e6, 100 * s.gap, s.speedup_vs_serial);
    for (double share : s.tier_share) std::printf(" %6.1f%%", 100 * share);
    std::printf("\n");
    if (s.label == "completion") {
      completion_gap = s.gap;
      have_completion_gap = s.bound_seconds > 0;
    }
    if (s.label == "completion+idle") reads_alone = s.throughput_bps;  // same idle time as the write runs
    out["runs"].push_back(RunJson(r, s, StepBounds(r, alone)));
  }
  for (const Run& r : results) {
    if (r.label.rfind("completion+writes:", 0) == 0 && reads_alone > 0) {
      std::printf("%s: reads at %.3f x reads alone (completion+idle)\n", r.label.c_str(), Bandwidth(r) / reads_alone);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  if (!plot_path.empty()) Plot(plot_path, results, alone, tier_names);
  if (check >= 0) {
    if (!have_completion_gap) {
      std::cerr << "kvbench: --check needs the completion policy and the tiers' alone runs\n";
      return 3;
    }
    if (completion_gap > check) {
      std::printf("check FAILED: completion gap %+.1f%% > %.1f%%\n", 100 * completion_gap, 100 * check);
      return 3;
    }
    std::printf("check passed: completion gap %+.1f%% <= %.1f%%\n", 100 * completion_gap, 100 * check);
  }
  return 0;
}

}  // namespace
}  // namespace kvbench

int main(int argc, char** argv) { return kvbench::Main(argc, argv); }
