// kvstreamctl: inspect and operate a running kvstreamd.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "kvstream/client.h"

namespace kvstream {
namespace {

constexpr char kDefaultSocket[] = "/run/kvstream/kvstreamd.sock";

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
  return buf;
}

nlohmann::json TierJson(const TierStats& t) {
  nlohmann::json j = {{"name", t.name}, {"path", t.path}, {"group", t.group}, {"io_engine", t.io_engine},
                      {"direct_io", t.direct_io},
                      {"mem_alignment", t.mem_alignment}, {"offset_alignment", t.offset_alignment},
                      {"fixed_buffers", t.fixed_buffers}, {"queue_depth", t.queue_depth},
                      {"capacity_bytes", t.capacity_bytes}, {"used_bytes", t.used_bytes}, {"chunks", t.chunks},
                      {"resubmits", t.resubmits}, {"fixed_ops", t.fixed_ops},
                      {"reference_bandwidth_bps", t.reference_bandwidth_bps}, {"stalled", t.stalled},
                      {"readable", t.readable}, {"writable", t.writable}, {"condition", t.condition},
                      {"shared", t.shared}, {"foreign_chunks", t.foreign_chunks}, {"discovered", t.discovered}};
  for (const TierCounter& c : kTierCounters) j[c.name] = t.*c.field;  // tier_counters.h
  return j;
}

nlohmann::json StepJson(const StepRecord& s) {
  nlohmann::json j = {{"id", s.id}, {"start_unix_ns", s.start_unix_ns}, {"chunks", s.chunks}, {"hits", s.hits},
                      {"misses", s.misses}, {"failed", s.failed}, {"bytes", s.bytes}, {"wall_seconds", s.wall_seconds},
                      {"bound_seconds", s.bound_seconds}, {"gap", s.gap}, {"routing", s.routing},
                      {"batching", s.batching}, {"tiers", nlohmann::json::array()}};
  // The load estimate at the step's start: null when there was none (a tier not measured yet).
  j["estimate_seconds"] = std::isfinite(s.estimate_seconds) ? nlohmann::json(s.estimate_seconds) : nlohmann::json(nullptr);
  for (const TierStep& t : s.tiers) {
    j["tiers"].push_back({{"tier", t.tier}, {"blocks", t.blocks}, {"bytes", t.bytes}, {"busy_seconds", t.busy_seconds},
                          {"bandwidth_bps", t.bandwidth_bps}, {"eligible", t.eligible}});
  }
  return j;
}

nlohmann::json PoliciesJson(const Policies& p) {
  return {{"routing", ToString(p.routing)}, {"batching", ToString(p.batching)}, {"writes", ToString(p.writes)},
          {"replication", ToString(p.replication)}};
}

std::string PoliciesText(const Policies& p) {
  return "routing " + ToString(p.routing) + ", batching " + std::string(ToString(p.batching)) + ", writes " +
         std::string(ToString(p.writes)) + ", replication " + std::string(ToString(p.replication));
}

// What a persist's reply says of it: written to its tiers, and which of them synced it (durable).
std::string WrittenText(const PersistResult& r) {
  auto mask = [](uint32_t m) { return absl::StrCat("tier mask 0x", absl::Hex(m)); };
  if (r.synced_mask != 0 && r.synced_mask == r.tier_mask) return absl::StrCat("durable (synced) on ", mask(r.tier_mask));
  if (r.synced_mask != 0) {
    return absl::StrCat("written to ", mask(r.tier_mask), ", durable (synced) on ", mask(r.synced_mask));
  }
  return absl::StrCat("written to ", mask(r.tier_mask), ", not synced: a power cut may lose it");
}

std::string FsyncText(FsyncPolicy fsync) {
  return fsync == FsyncPolicy::kChunk ? "fsync chunk (persists are synced: durable)"
                                      : "fsync none (persists are written, not synced: a power cut may lose them)";
}

int Fail(const absl::Status& s) {
  std::cerr << "kvstreamctl: " << s.message() << "\n";
  return 1;
}

int Main(int argc, char** argv) {
  CLI::App app{"kvstreamctl: inspect and operate a running kvstreamd"};
  std::string socket = kDefaultSocket;
  bool json = false;
  app.add_option("--socket", socket, "kvstreamd's control socket")->capture_default_str();
  app.add_flag("--json", json, "machine-readable output");
  app.require_subcommand(1);
  auto* stats = app.add_subcommand("stats", "store-wide counters");
  auto* tiers = app.add_subcommand("tiers", "per-tier state and counters");
  auto* steps = app.add_subcommand("steps", "recent step records with their gap to the bound");
  uint32_t max_steps = 16;
  steps->add_option("-n,--max", max_steps, "how many")->capture_default_str();
  auto* health = app.add_subcommand("health", "OK, or what is wrong (tiers out of reach, read-only, stalled); "
                                    "exit status 0 when OK, 1 when not");
  auto* lookup = app.add_subcommand("lookup",
                                    "which keys are present, the prefix hit count, and the expected time to load "
                                    "each key with every present one before it (the daemon's load estimate)");
  std::vector<std::string> keys;
  lookup->add_option("keys", keys, "keys")->required();
  auto* put = app.add_subcommand("put", "store a file as a chunk (waits until it is written; it is durable, "
                                 "synced, only under the daemon's fsync: chunk)");
  std::string key, file;
  put->add_option("key", key)->required();
  put->add_option("file", file)->required()->check(CLI::ExistingFile);
  auto* get = app.add_subcommand("get", "fetch a chunk into a file");
  get->add_option("key", key)->required();
  get->add_option("file", file)->required();
  auto* evict = app.add_subcommand("evict", "evict by key, by bytes or all, from one tier or every tier");
  EvictRequest ev;
  evict->add_option("--key", ev.key, "this key");
  evict->add_option("--tier", ev.tier, "only this tier (a tier over several drives: all its drives; one drive by its name, e.g. nvme.2)");
  std::string bytes_text;
  evict->add_option("--bytes", bytes_text,
                    "chunks until this many bytes per tier (e.g. 10GiB) are freed, least recently used first "
                    "(under isolation: uid, from the tenant furthest over its share first)");
  evict->add_flag("--all", ev.all, "everything");
  auto* policy = app.add_subcommand("policy", "show or switch routing/batching/write/replication policies at run time");
  std::string routing, batching, writes, replication;
  policy->add_option("--routing", routing, "completion | static:<g> | fastest");
  policy->add_option("--batching", batching, "step | serial");
  policy->add_option("--writes", writes, "deferred | immediate");
  policy->add_option("--replication", replication, "all | primary | adaptive (for chunks staged from then on)");
  CLI11_PARSE(app, argc, argv);

  if (put->parsed() || get->parsed()) {
    uint64_t size = 0;
    std::string content;
    if (put->parsed()) {
      std::ifstream in(file, std::ios::binary);
      content.assign(std::istreambuf_iterator<char>(in), {});
      size = content.size();
      if (size == 0) return Fail(absl::InvalidArgumentError(file + " is empty"));
    } else {
      auto c = Client::Connect(socket);
      if (!c.ok()) return Fail(c.status());
      auto l = (*c)->Lookup({key});
      if (!l.ok()) return Fail(l.status());
      if (!(*l)[0].present) return Fail(absl::NotFoundError("'" + key + "' is not stored"));
      size = (*l)[0].size;
    }
    auto c = Client::Attach(socket, {"kvstreamctl", 0, 1, (size + 4095) / 4096 * 4096 + 4096});
    if (!c.ok()) return Fail(c.status());
    if (put->parsed()) {
      std::memcpy((*c)->arena(), content.data(), size);
      std::vector<PersistResult> results;
      if (absl::Status s = (*c)->Persist({{key, 0, size}}, &results); !s.ok()) return Fail(s);
      const PersistResult& r = results[0];
      if (json) {
        std::cout << nlohmann::json{{"key", key},           {"bytes", size},
                                    {"tier_mask", r.tier_mask}, {"synced_mask", r.synced_mask},
                                    {"durable", r.durable()},   {"lost_mask", r.lost_mask},
                                    {"lost_reason", r.lost_reason}}.dump()
                  << "\n";
      } else {
        std::printf("stored '%s' (%llu bytes), %s", key.c_str(), static_cast<unsigned long long>(size),
                    WrittenText(r).c_str());
        if (r.lost_mask != 0) std::printf("; replicas lost on tier mask 0x%x: %s", r.lost_mask, r.lost_reason.c_str());
        std::printf("\n");
      }
    } else {
      std::vector<ChunkResult> results;
      auto rec = (*c)->Retrieve({{key, 0, (*c)->arena_size()}}, &results);
      if (!rec.ok()) return Fail(rec.status());
      if (!results[0].status.ok()) return Fail(results[0].status);
      std::ofstream out(file, std::ios::binary);
      out.write(reinterpret_cast<const char*>((*c)->arena()), static_cast<std::streamsize>(results[0].size));
      if (!out) return Fail(absl::InternalError("cannot write " + file));
      if (json) {
        std::cout << nlohmann::json{{"key", key}, {"bytes", results[0].size}, {"step", StepJson(*rec)}}.dump() << "\n";
      } else {
        std::printf("fetched '%s' (%llu bytes) in %.4f s\n", key.c_str(),
                    static_cast<unsigned long long>(results[0].size), rec->wall_seconds);
      }
    }
    return 0;
  }

  auto client = Client::Connect(socket);
  if (!client.ok()) return Fail(client.status());
  Client& c = **client;
  if (health->parsed()) {
    auto h = c.Health();
    if (!h.ok()) return Fail(h.status());
    const bool ok = h->serving && h->problems.empty();
    if (json) {
      std::cout << nlohmann::json{{"ok", ok}, {"serving", h->serving}, {"version", h->version},
                                  {"problems", h->problems}, {"unusable_tiers", h->unusable_tiers},
                                  {"stalled_tiers", h->stalled_tiers}, {"degraded_tiers", h->degraded_tiers}}.dump(2)
                << "\n";
    } else {
      std::printf("%s (kvstreamd %s)\n", ok ? "OK" : "NOT OK", h->version.c_str());
      for (const std::string& p : h->problems) std::printf("  %s\n", p.c_str());
      for (const std::string& t : h->degraded_tiers) std::printf("  errors since start on tier %s\n", t.c_str());
    }
    return ok ? 0 : 1;
  }
  if (stats->parsed() || tiers->parsed()) {
    uint32_t sessions = 0;
    auto s = c.Stats(&sessions);
    if (!s.ok()) return Fail(s.status());
    if (stats->parsed()) {
      if (json) {
        nlohmann::json j = {{"chunks", s->chunks}, {"sessions", sessions}, {"staged_bytes", s->staged_bytes},
                            {"staged_chunks", s->staged_chunks}, {"staging_limit_bytes", s->staging_limit_bytes},
                            {"staging_kept_bytes", s->staging_kept_bytes},
                            {"steps", s->steps}, {"retrieve_hits", s->retrieve_hits},
                            {"retrieve_misses", s->retrieve_misses}, {"retrieve_failures", s->retrieve_failures},
                            {"persists", s->persists}, {"persist_failures", s->persist_failures},
                            {"writes_under_pressure", s->writes_under_pressure},
                            {"persists_dropped", s->persists_dropped}, {"persist_dropped_bytes", s->persist_dropped_bytes},
                            {"shared_copies", s->shared_copies}, {"shared_copies_skipped", s->shared_copies_skipped},
                            {"policies", PoliciesJson(s->policies)}, {"fsync", ToString(s->fsync)}};
        std::cout << j.dump(2) << "\n";
      } else {
        std::printf("chunks %llu, sessions %u, steps %llu (hits %llu, misses %llu, failures %llu)\n",
                    static_cast<unsigned long long>(s->chunks), sessions, static_cast<unsigned long long>(s->steps),
                    static_cast<unsigned long long>(s->retrieve_hits), static_cast<unsigned long long>(s->retrieve_misses),
                    static_cast<unsigned long long>(s->retrieve_failures));
        std::printf("staging %s of %s (%llu chunks, %s more kept for reuse), persists %llu (%llu failed), writes under pressure %llu\n",
                    Mib(s->staged_bytes).c_str(), Mib(s->staging_limit_bytes).c_str(),
                    static_cast<unsigned long long>(s->staged_chunks), Mib(s->staging_kept_bytes).c_str(),
                    static_cast<unsigned long long>(s->persists),
                    static_cast<unsigned long long>(s->persist_failures),
                    static_cast<unsigned long long>(s->writes_under_pressure));
        if (s->persists_dropped > 0) {
          std::printf("persists dropped for want of staging room: %llu (%s)\n",
                      static_cast<unsigned long long>(s->persists_dropped), Mib(s->persist_dropped_bytes).c_str());
        }
        std::printf("policies: %s\n", PoliciesText(s->policies).c_str());
        std::printf("%s\n", FsyncText(s->fsync).c_str());
      }
    } else if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const TierStats& t : s->tiers) j.push_back(TierJson(t));
      std::cout << j.dump(2) << "\n";
    } else {
      for (const TierStats& t : s->tiers) {
        std::printf("%-8s %-36s %-8s %-8s %6llu chunks %12s / %-12s read %12s written %12s errors r%llu/c%llu/w%llu "
                    "hedged %llu%s%s%s\n",
                    t.name.c_str(), t.path.c_str(), t.direct_io ? "O_DIRECT" : "buffered", t.io_engine.c_str(),
                    static_cast<unsigned long long>(t.chunks), Mib(t.used_bytes).c_str(), Mib(t.capacity_bytes).c_str(),
                    Mib(t.bytes_read).c_str(), Mib(t.bytes_written).c_str(),
                    static_cast<unsigned long long>(t.read_errors), static_cast<unsigned long long>(t.checksum_failures),
                    static_cast<unsigned long long>(t.write_errors), static_cast<unsigned long long>(t.hedged_reads),
                    t.shared ? absl::StrCat("  shared: ", t.foreign_chunks, " other nodes' chunks indexed, ", t.discovered,
                                            " found").c_str()
                             : "",
                    t.stalled ? "  STALLED" : "", t.condition.empty() ? "" : ("  " + t.condition).c_str());
      }
      // A tier over several drives: its drives' sum.
      for (size_t i = 0; i < s->tiers.size();) {
        size_t end = i;
        TierStats sum;
        for (; end < s->tiers.size() && s->tiers[end].group == s->tiers[i].group; ++end) {
          const TierStats& t = s->tiers[end];
          sum.chunks += t.chunks, sum.used_bytes += t.used_bytes, sum.capacity_bytes += t.capacity_bytes;
          sum.bytes_read += t.bytes_read, sum.bytes_written += t.bytes_written;
          sum.readable = sum.readable && t.readable;
        }
        if (end - i > 1) {
          std::printf("%-8s %zu drives%s %6llu chunks %12s / %-12s read %12s written %12s\n", s->tiers[i].group.c_str(),
                      end - i, sum.readable ? "" : " (not all usable)", static_cast<unsigned long long>(sum.chunks),
                      Mib(sum.used_bytes).c_str(), Mib(sum.capacity_bytes).c_str(), Mib(sum.bytes_read).c_str(),
                      Mib(sum.bytes_written).c_str());
        }
        i = end;
      }
    }
  } else if (steps->parsed()) {
    auto s = c.Steps(max_steps);
    if (!s.ok()) return Fail(s.status());
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const StepRecord& r : *s) j.push_back(StepJson(r));
      std::cout << j.dump(2) << "\n";
    } else {
      for (const StepRecord& r : *s) {
        std::printf("step %llu: %u chunks (%u hit, %u miss, %u failed) %s in %.4f s, bound %.4f s, gap %+.1f%% [%s/%s]",
                    static_cast<unsigned long long>(r.id), r.chunks, r.hits, r.misses, r.failed, Mib(r.bytes).c_str(),
                    r.wall_seconds, r.bound_seconds, 100 * r.gap, r.routing.c_str(), r.batching.c_str());
        for (const TierStep& t : r.tiers) std::printf("  %s %s", t.tier.c_str(), Mib(t.bytes).c_str());
        if (std::isfinite(r.estimate_seconds)) std::printf("  estimated %.4f s", r.estimate_seconds);
        std::printf("\n");
      }
    }
  } else if (lookup->parsed()) {
    size_t prefix = 0;
    std::vector<double> load;
    auto l = c.Lookup(keys, &prefix, 0, &load);
    if (!l.ok()) return Fail(l.status());
    if (json) {
      nlohmann::json j = {{"prefix_hits", prefix}, {"keys", nlohmann::json::array()}};
      for (size_t i = 0; i < keys.size(); ++i) {
        // The estimate: seconds, "inf" (no reachable tier holds one), or null (not measured yet).
        const nlohmann::json estimate = std::isnan(load[i])   ? nlohmann::json(nullptr)
                                        : std::isinf(load[i]) ? nlohmann::json("inf")
                                                              : nlohmann::json(load[i]);
        j["keys"].push_back({{"key", keys[i]}, {"present", (*l)[i].present}, {"size", (*l)[i].size},
                             {"tier_mask", (*l)[i].tier_mask}, {"load_seconds", estimate}});
      }
      std::cout << j.dump(2) << "\n";
    } else {
      for (size_t i = 0; i < keys.size(); ++i) {
        std::printf("%-40s %s", keys[i].c_str(), (*l)[i].present ? "present" : "absent");
        if ((*l)[i].present) {
          std::printf("  %llu bytes  tiers 0x%x  load ", static_cast<unsigned long long>((*l)[i].size), (*l)[i].tier_mask);
          if (std::isnan(load[i])) {
            std::printf("not measured yet");
          } else if (std::isinf(load[i])) {
            std::printf("unreachable");
          } else {
            std::printf("%.3f ms", load[i] * 1e3);
          }
        }
        std::printf("\n");
      }
      std::printf("prefix hits: %zu of %zu\n", prefix, keys.size());
    }
  } else if (policy->parsed()) {
    auto stats = c.Stats();  // the policies in force, which the options change
    if (!stats.ok()) return Fail(stats.status());
    Client::PoliciesInForce in_force{stats->policies, false};
    if (!routing.empty() || !batching.empty() || !writes.empty() || !replication.empty()) {
      auto wanted = ChangePolicies(stats->policies, routing, batching, writes, replication);
      if (!wanted.ok()) return Fail(wanted.status());
      auto set = c.SetPolicies(*wanted);
      if (!set.ok()) return Fail(set.status());
      in_force = *set;
    }
    const Policies* p = &in_force.policies;
    const bool pending = in_force.pending;
    if (json) {
      nlohmann::json j = PoliciesJson(*p);
      j["pending"] = pending;
      std::cout << j.dump() << "\n";
    } else {
      std::printf("%s%s\n", PoliciesText(*p).c_str(),
                  pending ? "  (requested policies pending: they apply once the steps in flight finish)" : "");
    }
  } else if (evict->parsed()) {
    if (!bytes_text.empty()) {
      auto b = ParseBytes(bytes_text);
      if (!b.ok()) return Fail(b.status());
      ev.bytes = *b;
    }
    auto r = c.Evict(ev);
    if (!r.ok()) return Fail(r.status());
    if (json) {
      std::cout << nlohmann::json{{"replicas", r->replicas}, {"bytes", r->bytes}}.dump() << "\n";
    } else {
      std::printf("evicted %llu replicas, %s\n", static_cast<unsigned long long>(r->replicas), Mib(r->bytes).c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvstream

int main(int argc, char** argv) { return kvstream::Main(argc, argv); }
