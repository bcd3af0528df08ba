#include "stall.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "kvstream/client.h"
#include "versioned_payload.h"

namespace kvtorture {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Workload {
  std::unique_ptr<kvstream::Client> client;
  std::vector<kvstream::ChunkRange> chunks;
};

// A session holding `chunks` chunks of fresh keys, persisted on every tier (written on return).
absl::StatusOr<Workload> Populate(const StallOptions& o, const std::string& prefix) {
  Workload w;
  auto c = kvstream::Client::Attach(o.socket, {"kvtorture-stall", 0, 1, o.chunks * o.chunk_bytes});
  if (!c.ok()) return c.status();
  w.client = *std::move(c);
  for (int i = 0; i < o.chunks; ++i) {
    w.chunks.push_back({prefix + std::to_string(i), i * o.chunk_bytes, o.chunk_bytes});
    FillPayload(w.chunks.back().key, 1, w.client->arena() + w.chunks.back().offset, o.chunk_bytes);
  }
  std::vector<kvstream::PersistResult> results;
  if (absl::Status s = w.client->Persist(w.chunks, &results); !s.ok()) return s;
  return w;
}

// One step over every chunk; false when a chunk is missing or a byte is wrong.
bool Step(Workload& w, double* seconds) {
  std::fill(w.client->arena(), w.client->arena() + w.client->arena_size(), 0);
  const auto start = Clock::now();
  std::vector<kvstream::ChunkResult> results;
  auto record = w.client->Retrieve(w.chunks, &results);
  *seconds = Since(start);
  if (!record.ok()) {
    std::fprintf(stderr, "kvtorture: retrieve: %s\n", record.status().ToString().c_str());
    return false;
  }
  for (size_t i = 0; i < w.chunks.size(); ++i) {
    uint64_t version;
    if (!results[i].status.ok() ||
        !ReadPayload(w.chunks[i].key, w.client->arena() + w.chunks[i].offset, results[i].size, &version)) {
      std::fprintf(stderr, "kvtorture: %s: %s\n", w.chunks[i].key.c_str(),
                   results[i].status.ok() ? "wrong bytes" : results[i].status.ToString().c_str());
      return false;
    }
  }
  return true;
}

std::string Prefix() { return "stall-" + std::to_string(std::random_device{}()) + "/"; }

void RunHook(const std::string& hook) {
  if (!hook.empty() && std::system(hook.c_str()) != 0) std::fprintf(stderr, "kvtorture: hook failed: %s\n", hook.c_str());
}

}  // namespace

int RunStall(const StallOptions& o) {
  auto w = Populate(o, Prefix());
  if (!w.ok()) {
    std::fprintf(stderr, "kvtorture: populate: %s\n", w.status().ToString().c_str());
    return 1;
  }
  auto other = kvstream::Client::Attach(o.socket, {"kvtorture-persist", 1, 2, 1 << 20});
  auto control = kvstream::Client::Connect(o.socket);
  if (!other.ok() || !control.ok()) return 1;
  std::atomic<double> step_s{0};
  bool intact = false;
  std::thread reader([&] {
    double seconds = 0;
    intact = Step(*w, &seconds);
    step_s = seconds;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(o.hook_after_ms));
  const auto hooked = Clock::now();
  RunHook(o.hook);
  // A persist from another session while the tier misbehaves.
  double persist_s = -1;
  std::thread writer([&] {
    FillPayload("stall-other", 1, (*other)->arena(), 4096);
    const auto start = Clock::now();
    if ((*other)->Persist({{"stall-other", 0, 4096}}).ok()) persist_s = Since(start);
  });
  double health_s = -1;
  while (!o.expect_stalled.empty() && Since(hooked) < o.health_limit_s + 1) {
    auto h = (*control)->Health();
    if (h.ok() && std::count(h->stalled_tiers.begin(), h->stalled_tiers.end(), o.expect_stalled) > 0) {
      health_s = Since(hooked);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  bool undone = false;
  for (const auto started = Clock::now(); !o.undo.empty() && Since(started) < 5 * o.step_limit_s;) {
    if (step_s > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (step_s == 0 && !o.undo.empty()) {  // the step hangs on the tier: let it finish, then fail
    std::fprintf(stderr, "kvtorture: the step is still waiting after %.0f s; undoing the hook\n", 5 * o.step_limit_s);
    RunHook(o.undo);
    undone = true;
  }
  reader.join();
  writer.join();
  std::printf("stall: step of %d x %llu KiB took %.3f s (limit %.1f), bytes %s; health named %s stalled after %.2f s "
              "(limit %.1f); a concurrent 4 KiB persist took %.3f s (limit %.1f)\n",
              o.chunks, static_cast<unsigned long long>(o.chunk_bytes >> 10), step_s.load(), o.step_limit_s,
              intact ? "intact" : "WRONG", o.expect_stalled.empty() ? "-" : o.expect_stalled.c_str(), health_s,
              o.health_limit_s, persist_s, o.persist_limit_s);
  const bool ok = !undone && intact && step_s <= o.step_limit_s && persist_s >= 0 && persist_s <= o.persist_limit_s &&
                  (o.expect_stalled.empty() || (health_s >= 0 && health_s <= o.health_limit_s));
  return ok ? 0 : 1;
}

int RunSlow(const StallOptions& o) {
  auto w = Populate(o, Prefix());
  auto control = kvstream::Client::Connect(o.socket);
  if (!w.ok() || !control.ok()) {
    std::fprintf(stderr, "kvtorture: populate or connect failed\n");
    return 1;
  }
  // Switches the daemon's routing, keeping its other policies.
  auto route = [&control](const char* routing) {
    auto stats = (*control)->Stats();
    if (!stats.ok()) return false;
    auto wanted = kvstream::ChangePolicies(stats->policies, routing, "", "", "");
    return wanted.ok() && (*control)->SetPolicies(*wanted).ok();
  };
  double seconds;
  // Warm up under completion routing: every tier's read time is known before it turns slow.
  if (!route("completion") || !Step(*w, &seconds) || !Step(*w, &seconds)) return 1;
  std::vector<double> alone;
  if (!route("static:1")) return 1;
  for (int s = 0; s < o.steps; ++s) {
    if (!Step(*w, &seconds)) return 1;
    alone.push_back(seconds);
  }
  std::sort(alone.begin(), alone.end());
  const double reference = alone[alone.size() / 2];
  RunHook(o.hook);
  if (!route("completion")) return 1;
  double worst = 0;
  for (int s = 0; s < o.steps; ++s) {
    if (!Step(*w, &seconds)) return 1;
    worst = std::max(worst, seconds / reference);
    std::printf("slow: step %d under completion %.3f s = %.2f x the first tier alone (%.3f s)\n", s, seconds,
                seconds / reference, reference);
  }
  std::printf("slow: worst step %.2f x the first tier alone (limit %.2f)\n", worst, o.ratio_limit);
  return worst <= o.ratio_limit ? 0 : 1;
}

}  // namespace kvtorture
