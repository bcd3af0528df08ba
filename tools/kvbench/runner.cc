#include "runner.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "xxhash.h"

namespace kvbench {
namespace {

using kvstream::ChunkRange;
using kvstream::Client;

// The first 8 bytes of every populated chunk: a tag derived from its key, so a step can check
// that each rank got the chunk it asked for (the daemon checks the bytes' checksums itself).
uint64_t Tag(const std::string& key) { return XXH3_64bits(key.data(), key.size()); }

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

StepHook ShellStepHook(const std::string& command) {
  if (command.empty()) return {};
  return [command](size_t step) {
    const std::string cmd = absl::StrReplaceAll(command, {{"{step}", std::to_string(step)}});
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "kvbench: step hook failed: %s\n", cmd.c_str());
  };
}

absl::Status RequireDirectIo(const kvstream::StoreStats& stats, bool allow_buffered) {
  for (const auto& t : stats.tiers) {
    if (!t.direct_io && !allow_buffered) {
      return absl::FailedPreconditionError(absl::StrCat("tier ", t.name, " uses buffered I/O: the page cache would serve ",
                                                        "reads (use O_DIRECT-capable tiers, or --allow-buffered)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Client>>> AttachRanks(const std::string& socket, uint32_t ranks,
                                                                  uint64_t arena_bytes) {
  std::vector<std::unique_ptr<Client>> sessions;
  double slowest = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    const double start = Now();
    auto c = Client::Attach(socket, {"kvbench", r, ranks, arena_bytes});
    slowest = std::max(slowest, Now() - start);
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("attach rank ", r, " (arena ", arena_bytes >> 20,
                                                           " MiB): ", c.status().message()));
    }
    sessions.push_back(*std::move(c));
  }
  // The daemon answers an attach at once and faults the arena in (and registers it) in the
  // background, piece by piece; Populate's writes come before any timed step.
  std::fprintf(stderr, "kvbench: attached %u ranks with %llu MiB arenas, %.3f s for the slowest\n", ranks,
               static_cast<unsigned long long>(arena_bytes >> 20), slowest);
  return sessions;
}

Bench::Bench(std::vector<std::unique_ptr<Client>> ranks, Client* control, Workload workload, size_t read_slots)
    : ranks_(std::move(ranks)), locked_(ranks_.size()), control_(control), w_(std::move(workload)),
      read_slots_(read_slots) {}

Bench::~Bench() {
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    if (!locked_[r].empty()) ranks_[r]->Unlock(locked_[r]).IgnoreError();
  }
  for (const ClientRegion& region : regions_) {
    munmap(region.data, region.size);
    close(region.fd);
  }
}

absl::Status Bench::ReadIntoClientRegions(bool device_pinned) {
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    ClientRegion region;
    region.size = ranks_[r]->arena_size();
    const std::string path = absl::StrCat("/dev/shm/kvbench-region-", getpid(), "-", r);
    region.fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (region.fd < 0) return absl::InternalError(absl::StrCat("creating ", path, ": ", std::strerror(errno)));
    unlink(path.c_str());
    void* data = MAP_FAILED;
    if (ftruncate(region.fd, static_cast<off_t>(region.size)) == 0) {
      data = mmap(nullptr, region.size, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd, 0);
    }
    if (data == MAP_FAILED) {
      close(region.fd);
      return absl::ResourceExhaustedError(absl::StrCat("cannot size or map ", region.size, " bytes of /dev/shm"));
    }
    region.data = static_cast<uint8_t*>(data);
    regions_.push_back(region);
    auto id = ranks_[r]->AddRegion(region.fd, region.size, device_pinned);
    if (!id.ok()) return id.status();
    regions_.back().id = *id;
  }
  return absl::OkStatus();
}

Bench::ReadMemory Bench::ReadTarget(uint32_t r) const {
  if (regions_.empty()) return {ranks_[r]->arena(), 0};
  return {regions_[r].data, regions_[r].id};
}

absl::Status Bench::Populate() {
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
      auto present = LockChunks(r, keys);  // the ones stored already, locked at once
      if (!present.ok()) {
        status[r] = present.status();
        return;
      }
      std::vector<ChunkRange> pending;
      auto flush = [&] {
        if (pending.empty()) return absl::OkStatus();
        std::vector<kvstream::PersistResult> results;
        absl::Status s = c.Persist(pending, &results);
        for (const auto& res : results) {
          if (s.ok() && !res.status.ok()) s = res.status;
        }
        written += pending.size();
        std::vector<std::string> stored;
        for (const ChunkRange& chunk : pending) stored.push_back(chunk.key);
        pending.clear();
        if (!s.ok()) return s;
        auto locked = LockChunks(r, stored);  // before later flushes can push them out
        if (!locked.ok()) return locked.status();
        const auto missing = std::count_if(locked->begin(), locked->end(), [](const auto& p) { return !p.present; });
        if (missing > 0) {
          return absl::ResourceExhaustedError(absl::StrCat(
              missing, " chunks were evicted as soon as they were stored: the tiers' capacity is too small for the ",
              "chunks the steps read"));
        }
        return absl::OkStatus();
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

absl::StatusOr<std::vector<kvstream::LookupEntry>> Bench::LockChunks(uint32_t r, const std::vector<std::string>& keys) {
  if (keys.empty()) return std::vector<kvstream::LookupEntry>{};
  auto present = ranks_[r]->Lookup(keys, nullptr, kLockSeconds);
  if (!present.ok()) return present.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*present)[i].present) locked_[r].push_back(keys[i]);
  }
  return present;
}

absl::Status Bench::LockReadChunks() {
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    std::vector<std::string> keys;
    for (const std::string& id : w_.populate) keys.push_back(RankKey(id, r));
    if (auto locked = LockChunks(r, keys); !locked.ok()) return locked.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<Run> Bench::Measure(const RunSpec& spec, const StepHook& hook) {
  if (absl::Status s = ChangePolicies(spec.routing, spec.batching, spec.writes, spec.replication); !s.ok()) return s;
  if (warm_up_) {
    for (size_t s = 0; s < w_.steps.size(); ++s) {
      if (hook) hook(s);
      if (auto t = RunStep(w_.steps[s], std::nullopt); !t.ok()) {
        return absl::Status(t.status().code(), absl::StrCat(spec.label, " warm-up step ", s, ": ", t.status().message()));
      }
    }
  }
  Run run;
  run.label = spec.label;
  const size_t run_index = runs_measured_++;
  PersistLog persists;
  std::vector<std::thread> background;  // background_writes: every step's persists, joined at the end
  const auto join_background = [&background] {
    for (std::thread& t : background) t.join();
    background.clear();
  };
  double previous_end = Now();
  for (size_t s = 0; s < w_.steps.size(); ++s) {
    if (hook) hook(s);
    const double idle = previous_end + spec.idle - Now();
    if (idle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idle));
    const BenchStep& step = w_.steps[s];
    auto before = control_->Stats();
    if (!before.ok()) {
      join_background();
      return before.status();
    }
    std::optional<double> estimate;
    if (estimate_) {
      auto e = EstimateStep(step);
      if (!e.ok()) {
        join_background();
        return absl::Status(e.status().code(), absl::StrCat(spec.label, " step ", s, ": estimate: ", e.status().message()));
      }
      estimate = *e;
    }
    auto times = RunStep(step, spec.with_writes ? std::optional<size_t>(run_index) : std::nullopt, &persists,
                         spec.background_writes ? &background : nullptr);
    if (!times.ok()) {
      join_background();
      return absl::Status(times.status().code(), absl::StrCat(spec.label, " step ", s, ": ", times.status().message()));
    }
    previous_end = times->start + times->reads;
    auto after = control_->Stats();
    if (!after.ok()) return after.status();
    StepSample sample;
    sample.seconds = times->reads;
    sample.bytes = step.reads.size() * ranks_.size() * w_.chunk_bytes;
    sample.daemon_cpu_seconds = after->process_cpu_seconds - before->process_cpu_seconds;
    if (estimate) {
      sample.estimated = true;
      sample.estimate_seconds = *estimate;
    }
    for (size_t t = 0; t < after->tiers.size(); ++t) {
      sample.tier_bytes.push_back(after->tiers[t].bytes_read - before->tiers[t].bytes_read);
      sample.tier_bytes_written.push_back(after->tiers[t].bytes_written - before->tiers[t].bytes_written);
    }
    if (spec.with_writes) {
      sample.cycle_seconds = times->cycle;
      sample.new_bytes = step.writes.size() * ranks_.size() * w_.chunk_bytes;
      sample.write_stall_seconds = after->write_stall_seconds - before->write_stall_seconds;
    }
    run.steps.push_back(std::move(sample));
  }
  join_background();
  absl::MutexLock lock(&persists.mu);
  if (!persists.status.ok()) {
    return absl::Status(persists.status.code(), absl::StrCat(spec.label, ": ", persists.status.message()));
  }
  run.persist_seconds = std::move(persists.seconds);
  return run;
}

absl::StatusOr<double> Bench::EstimateStep(const BenchStep& step) {
  std::vector<std::string> keys;
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    for (const std::string& id : step.reads) keys.push_back(RankKey(id, r));
  }
  if (keys.empty()) return 0.0;
  std::vector<double> load;
  auto found = control_->Lookup(keys, nullptr, 0, &load);
  if (!found.ok()) return found.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*found)[i].present) return absl::NotFoundError(keys[i] + " is not stored");
  }
  if (load.size() != keys.size()) {
    return absl::InternalError(absl::StrCat("the daemon answered ", load.size(), " load estimates for ", keys.size(), " keys"));
  }
  return load.back();
}

void Bench::PersistLog::Add(const absl::StatusOr<double>& persisted) {
  absl::MutexLock lock(&mu);
  if (persisted.ok()) {
    seconds.push_back(*persisted);
  } else if (status.ok()) {
    status = persisted.status();
  }
}

absl::StatusOr<Bench::StepTimes> Bench::RunStep(const BenchStep& step, std::optional<size_t> write_run,
                                                PersistLog* log, std::vector<std::thread>* background) {
  std::vector<absl::Status> status(ranks_.size());
  std::vector<double> done(ranks_.size(), 0);
  std::vector<std::thread> readers, writers;
  std::atomic<bool> go{false};
  const bool writes = write_run && !step.writes.empty() && log != nullptr;
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    readers.emplace_back([&, r] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      status[r] = ReadStep(r, step);
      done[r] = Now();
    });
    if (writes && background == nullptr) {
      writers.emplace_back([&, r] {
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        log->Add(WriteStep(r, step, *write_run));
      });
    }
  }
  StepTimes times;
  times.start = Now();
  go.store(true, std::memory_order_release);
  for (uint32_t r = 0; writes && background != nullptr && r < ranks_.size(); ++r) {
    // They outlive this step: they take nothing of it but `step` (the workload's) and `log` (the run's).
    background->emplace_back([this, r, &step, log, run = *write_run] { log->Add(WriteStep(r, step, run)); });
  }
  for (auto& t : readers) t.join();
  double end = times.start;
  for (double d : done) end = std::max(end, d);
  for (auto& t : writers) t.join();  // the forward pass: deferred writes drain here
  times.reads = end - times.start;
  times.cycle = std::max(end, Now()) - times.start;
  for (const absl::Status& st : status) {
    if (!st.ok()) return st;
  }
  if (writes && background == nullptr) {
    absl::MutexLock lock(&log->mu);
    if (!log->status.ok()) return log->status;
  }
  return times;
}

absl::StatusOr<double> Bench::MeasureChunkDrain(const std::string& routing, const BenchStep& probe, int pairs) {
  // Both reads of a pair start from the same idle (a blkio throttle credits a tier for idle time)
  // and they take turns going first.
  constexpr double kIdleSeconds = 0.2;
  const size_t boundaries = probe.reads.size() * ranks_.size() - 1;
  std::vector<double> drains;
  for (int p = 0; p < pairs; ++p) {
    double seconds[2];  // [0] step batching, [1] serial
    for (int i = 0; i < 2; ++i) {
      const int serial = (i + p) % 2;
      if (absl::Status s = ChangePolicies(routing, serial ? "serial" : "step", "", ""); !s.ok()) return s;
      std::this_thread::sleep_for(std::chrono::duration<double>(kIdleSeconds));
      auto t = RunStep(probe, std::nullopt);
      if (!t.ok()) return t.status();
      seconds[serial] = t->reads;
    }
    drains.push_back((seconds[1] - seconds[0]) / static_cast<double>(boundaries));
  }
  std::nth_element(drains.begin(), drains.begin() + drains.size() / 2, drains.end());
  return drains[drains.size() / 2];
}

absl::StatusOr<std::vector<double>> Bench::MeasureChunkDrains(const std::vector<RunSpec>& alone, size_t chunks,
                                                              int pairs, const kvstream::Policies& restore) {
  if (w_.steps.empty() || pairs <= 0) return std::vector<double>{};
  BenchStep probe;
  const auto& first = w_.steps[0].reads;
  probe.reads.assign(first.begin(), first.begin() + std::min(chunks, first.size()));
  if (probe.reads.size() * ranks_.size() < 2) return std::vector<double>{};
  std::vector<double> drains;
  for (const RunSpec& spec : alone) {
    auto d = MeasureChunkDrain(spec.routing, probe, pairs);
    if (!d.ok()) {
      RestorePolicies(restore);
      return d.status();
    }
    drains.push_back(*d);
  }
  RestorePolicies(restore);
  return drains;
}

absl::StatusOr<std::vector<Run>> Bench::MeasureAll(const std::vector<RunSpec>& runs, const StepHook& hook,
                                                   const kvstream::Policies& restore) {
  std::vector<Run> results;
  for (const RunSpec& spec : runs) {
    auto run = Measure(spec, hook);
    if (!run.ok()) {
      RestorePolicies(restore);
      return run.status();
    }
    std::fprintf(stderr, "kvbench: %-24s %.3f s\n", spec.label.c_str(), TotalSeconds(*run));
    if (results.empty() && !warm_up_ && run->steps.size() > 2) {
      // The sessions' first step against their steady steps (same size under the synthetic workload).
      std::vector<double> rest;
      for (size_t i = 1; i < run->steps.size(); ++i) rest.push_back(run->steps[i].seconds);
      std::nth_element(rest.begin(), rest.begin() + rest.size() / 2, rest.end());
      std::fprintf(stderr, "kvbench: first step %.3f s, steady steps %.3f s (median)\n", run->steps[0].seconds,
                   rest[rest.size() / 2]);
    }
    results.push_back(*std::move(run));
  }
  RestorePolicies(restore);
  return results;
}

void Bench::RestorePolicies(const kvstream::Policies& policies) {
  auto p = control_->SetPolicies(policies);
  if (!p.ok()) std::fprintf(stderr, "kvbench: could not restore the policies: %s\n", std::string(p.status().message()).c_str());
}

absl::Status Bench::ChangePolicies(const std::string& routing, const std::string& batching, const std::string& writes,
                                   const std::string& replication) {
  auto stats = control_->Stats();
  if (!stats.ok()) return stats.status();
  auto wanted = kvstream::ChangePolicies(stats->policies, routing, batching, writes, replication);
  if (!wanted.ok()) return wanted.status();
  return control_->SetPolicies(*wanted).status();
}

absl::Status Bench::ReadStep(uint32_t r, const BenchStep& step) {
  Client& c = *ranks_[r];
  const uint64_t slot = SlotBytes(w_.chunk_bytes);
  const ReadMemory into = ReadTarget(r);
  std::vector<ChunkRange> chunks;
  for (size_t i = 0; i < step.reads.size(); ++i) chunks.push_back({RankKey(step.reads[i], r), i * slot, slot, into.region});
  std::vector<kvstream::ChunkResult> results;
  auto rec = c.Retrieve(chunks, &results);
  if (!rec.ok()) return rec.status();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].status.ok()) return absl::Status(results[i].status.code(), chunks[i].key + ": " + std::string(results[i].status.message()));
    uint64_t tag;
    std::memcpy(&tag, into.data + chunks[i].offset, 8);
    if (results[i].size != w_.chunk_bytes || tag != Tag(chunks[i].key)) {
      return absl::DataLossError(chunks[i].key + ": wrong size or content");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Bench::WriteStep(uint32_t r, const BenchStep& step, size_t run) {
  Client& c = *ranks_[r];
  const uint64_t slot = SlotBytes(w_.chunk_bytes);
  std::vector<ChunkRange> chunks;
  for (size_t i = 0; i < step.writes.size(); ++i) {
    chunks.push_back({absl::StrCat(RankKey(step.writes[i], r), "@w", getpid(), ".", run), (read_slots_ + i) * slot,
                      w_.chunk_bytes});
  }
  std::vector<kvstream::PersistResult> results;
  const double start = Now();
  if (absl::Status s = c.Persist(chunks, &results); !s.ok()) return s;
  const double seconds = Now() - start;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].status.ok()) {
      return absl::Status(results[i].status.code(), absl::StrCat("persist ", chunks[i].key, ": ", results[i].status.message()));
    }
  }
  return seconds;
}

double FioBandwidth(const std::vector<std::string>& dirs, uint64_t block, uint32_t depth) {
  const std::string out = "/tmp/kvbench-fio-" + std::to_string(getpid()) + ".json";
  std::string cmd = absl::StrCat("fio --rw=read --bs=", block, " --iodepth=", depth,
                                 " --ioengine=io_uring --direct=1 --readonly --output-format=json --output=", out);
  for (size_t i = 0; i < dirs.size(); ++i) absl::StrAppend(&cmd, " --name=ref", i, " --opendir=", dirs[i]);
  absl::StrAppend(&cmd, " > /dev/null 2>&1");
  if (std::system(cmd.c_str()) != 0) return 0;
  try {
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::remove(out.c_str());
    // fio prints notes ("file ... may be ignored") before the JSON document.
    const size_t start = text.find('{');
    if (start == std::string::npos) return 0;
    nlohmann::json j = nlohmann::json::parse(text.substr(start));
    double bps = 0;  // the jobs ran at once: their bandwidths add up
    for (const auto& job : j.at("jobs")) bps += job.at("read").at("bw_bytes").get<double>();
    return bps;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace kvbench
