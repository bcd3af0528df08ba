#include "crash.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "daemon_runner.h"
#include "kvstream/client.h"
#include "versioned_payload.h"

namespace kvtorture {
namespace {

constexpr uint64_t kSizes[] = {4096, 300 << 10, 1 << 20};  // a version's size: kSizes[version % 3]
constexpr uint64_t kSlot = 1 << 20;                         // arena bytes per chunk
constexpr size_t kVerifyBatch = 16;

uint64_t SizeOf(uint64_t version) { return kSizes[version % 3]; }

// What the writers attempted and what the daemon acknowledged, per key; `synced`: acknowledged
// before the last sync point (or served after the last restart).
struct Ledger {
  std::mutex mu;
  std::vector<uint64_t> attempted, acked, synced;  // 0: never
  explicit Ledger(int keys) : attempted(keys, 0), acked(keys, 0), synced(keys, 0) {}
};

struct Counts {
  std::atomic<uint64_t> acked{0}, reads{0}, lost{0}, corrupt{0}, rolled_back{0}, cuts{0}, syncs{0};
};

// What a check after a restart holds the daemon to.
enum class Floor {
  kNone,    // a check under load: the versions acknowledged so far (absent only while unavailable)
  kAcked,   // after a restart: every acknowledged version is served
  kSynced,  // after a power cut under fsync: none: every version acknowledged before the last sync point
};

// Runs `command` with KVTORTURE_SEED=`seed` in its environment; false unless it exits 0.
bool RunHook(const std::string& command, uint64_t seed) {
  setenv("KVTORTURE_SEED", std::to_string(seed).c_str(), 1);
  const int status = std::system(command.c_str());
  if (status != 0) std::fprintf(stderr, "kvtorture: '%s' failed (%d)\n", command.c_str(), status);
  return status == 0;
}

std::string Key(int k) { return "torture/" + std::to_string(k); }

// Persists versions of the keys k with k % writers == w until the daemon goes away or `stop`.
void Write(const CrashOptions& o, int w, Ledger* ledger, Counts* counts, const std::atomic<bool>* stop) {
  auto c = kvstream::Client::Attach(o.socket, {"kvtorture", static_cast<uint32_t>(w), 1, kSlot});
  if (!c.ok()) return;
  std::mt19937_64 rng(o.seed * 7919 + w);
  while (!*stop) {
    const int k = static_cast<int>(rng() % o.keys) / o.writers * o.writers + w;
    if (k >= o.keys) continue;
    uint64_t version;
    {
      std::lock_guard lock(ledger->mu);
      version = ++ledger->attempted[k];
    }
    const uint64_t size = SizeOf(version);
    FillPayload(Key(k), version, (*c)->arena(), size);
    std::vector<kvstream::PersistResult> results;
    if (!(*c)->Persist({{Key(k), 0, size}}, &results).ok() || !results[0].status.ok()) return;  // daemon gone
    std::lock_guard lock(ledger->mu);
    ledger->acked[k] = std::max(ledger->acked[k], version);
    ++counts->acked;
  }
}

// Reads batches of keys back; every chunk must be absent (never acked) or an intact version no
// older than the one acknowledged before the read (under kSynced: before the last sync point) and
// no newer than the last attempted after it. After a restart (kAcked, kSynced) the version served
// is what the ledger holds the daemon to from then on. Returns false when the daemon went away.
bool Verify(kvstream::Client& c, const std::vector<int>& keys, Ledger* ledger, Counts* counts, Floor rule) {
  const bool require_all = rule != Floor::kNone;
  std::vector<uint64_t> floor(keys.size());
  {
    std::lock_guard lock(ledger->mu);
    for (size_t i = 0; i < keys.size(); ++i) floor[i] = (rule == Floor::kSynced ? ledger->synced : ledger->acked)[keys[i]];
  }
  std::vector<kvstream::ChunkRange> chunks;
  for (size_t i = 0; i < keys.size(); ++i) chunks.push_back({Key(keys[i]), i * kSlot, kSlot});
  std::vector<kvstream::ChunkResult> results;
  if (!c.Retrieve(chunks, &results).ok()) return false;
  std::lock_guard lock(ledger->mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    const int k = keys[i];
    ++counts->reads;
    const kvstream::ChunkResult& r = results[i];
    uint64_t version = 0;
    if (r.status.ok() && !ReadPayload(Key(k), c.arena() + chunks[i].offset, r.size, &version)) {
      ++counts->corrupt;
      std::fprintf(stderr, "kvtorture: %s: bad bytes served\n", Key(k).c_str());
    } else if (r.status.ok() && (version < floor[i] || version > ledger->attempted[k])) {
      ++(version < floor[i] ? counts->lost : counts->corrupt);
      std::fprintf(stderr, "kvtorture: %s: version %llu served, acknowledged %llu, attempted %llu\n", Key(k).c_str(),
                   static_cast<unsigned long long>(version), static_cast<unsigned long long>(floor[i]),
                   static_cast<unsigned long long>(ledger->attempted[k]));
    } else if (!r.status.ok() && floor[i] > 0 && (require_all || !absl::IsUnavailable(r.status))) {
      ++counts->lost;
      std::fprintf(stderr, "kvtorture: %s: acknowledged version %llu not served: %s\n", Key(k).c_str(),
                   static_cast<unsigned long long>(floor[i]), r.status.ToString().c_str());
    }
    if (!require_all) continue;
    const uint64_t served = r.status.ok() ? version : 0;
    if (served < ledger->acked[k] && served >= floor[i]) ++counts->rolled_back;  // within the bound
    // On the medium now: what every later check holds the daemon to.
    ledger->acked[k] = ledger->synced[k] = served;
  }
  return true;
}

void Read(const CrashOptions& o, int r, Ledger* ledger, Counts* counts, const std::atomic<bool>* stop) {
  auto c = kvstream::Client::Attach(o.socket, {"kvtorture-reader", static_cast<uint32_t>(r), 1, kVerifyBatch * kSlot});
  if (!c.ok()) return;
  std::mt19937_64 rng(o.seed * 104729 + r);
  while (!*stop) {
    std::vector<int> keys;
    for (size_t i = 0; i < kVerifyBatch; ++i) keys.push_back(static_cast<int>(rng() % o.keys));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    if (!Verify(**c, keys, ledger, counts, Floor::kNone)) return;
  }
}

// Sync points every o.sync_seconds until `stop`: what was acknowledged before one is durable once
// it returns.
void SyncPoints(const CrashOptions& o, Ledger* ledger, Counts* counts, const std::atomic<bool>* stop) {
  for (uint64_t n = 0; !*stop; ++n) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.sync_seconds));
    std::vector<uint64_t> acked;
    {
      std::lock_guard lock(ledger->mu);
      acked = ledger->acked;
    }
    if (*stop || !RunHook(o.sync_command, n)) return;
    std::lock_guard lock(ledger->mu);
    for (size_t k = 0; k < acked.size(); ++k) ledger->synced[k] = std::max(ledger->synced[k], acked[k]);
    ++counts->syncs;
  }
}

}  // namespace

int RunCrash(const CrashOptions& o) {
  DaemonRunner daemon(o.daemon, o.config, o.socket);
  Ledger ledger(o.keys);
  Counts counts;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> load(o.min_seconds, o.max_seconds);
  double slowest_start = 0;
  bool power_cut = false;  // the restart below follows a power cut
  for (int cycle = 0; cycle <= o.cycles; ++cycle) {
    const double started = daemon.Start(o.log);
    if (started < 0) {
      std::fprintf(stderr, "kvtorture: kvstreamd did not start (cycle %d); see %s\n", cycle, o.log.c_str());
      return 1;
    }
    slowest_start = std::max(slowest_start, started);
    // After every restart, everything acknowledged so far must be there.
    {
      auto c = kvstream::Client::Attach(o.socket, {"kvtorture-verify", 0, 1, kVerifyBatch * kSlot});
      if (!c.ok()) {
        std::fprintf(stderr, "kvtorture: attach: %s\n", c.status().ToString().c_str());
        return 1;
      }
      for (int k = 0; k < o.keys; k += kVerifyBatch) {
        std::vector<int> keys;
        for (int i = k; i < std::min(o.keys, k + static_cast<int>(kVerifyBatch)); ++i) keys.push_back(i);
        if (!Verify(**c, keys, &ledger, &counts, power_cut && o.synced_floor ? Floor::kSynced : Floor::kAcked)) return 1;
      }
    }
    if (cycle == o.cycles) break;
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < o.writers; ++w) threads.emplace_back(Write, std::cref(o), w, &ledger, &counts, &stop);
    for (int r = 0; r < o.readers; ++r) threads.emplace_back(Read, std::cref(o), r, &ledger, &counts, &stop);
    if (!o.sync_command.empty()) threads.emplace_back(SyncPoints, std::cref(o), &ledger, &counts, &stop);
    std::this_thread::sleep_for(std::chrono::duration<double>(load(rng)));
    daemon.Kill();  // mid-load: persists and reads in flight die with it
    stop = true;
    for (auto& t : threads) t.join();
    // The power fails with the daemon: nothing it acknowledged after the cut can exist, and the
    // requests it left in the file system are done once it is reaped.
    power_cut = !o.cut_command.empty();
    if (power_cut) {
      if (!RunHook(o.cut_command, rng() % 1000000007) || !RunHook(o.power_on_command, 0)) return 1;
      ++counts.cuts;
    }
    std::printf("cycle %d: killed after load; %llu versions acknowledged so far, restart took %.2f s\n", cycle + 1,
                static_cast<unsigned long long>(counts.acked.load()), started);
    std::fflush(stdout);
  }
  daemon.Kill();
  std::printf("crash: %d kill -9 cycles (%llu power cuts, %llu sync points), %llu acknowledged versions, %llu chunk "
              "reads checked; lost %llu, corrupt %llu, rolled back to the last sync point %llu; slowest start %.2f s\n",
              o.cycles, static_cast<unsigned long long>(counts.cuts.load()),
              static_cast<unsigned long long>(counts.syncs.load()), static_cast<unsigned long long>(counts.acked.load()),
              static_cast<unsigned long long>(counts.reads.load()), static_cast<unsigned long long>(counts.lost.load()),
              static_cast<unsigned long long>(counts.corrupt.load()),
              static_cast<unsigned long long>(counts.rolled_back.load()), slowest_start);
  return counts.lost == 0 && counts.corrupt == 0 ? 0 : 1;
}

}  // namespace kvtorture
