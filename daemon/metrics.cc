#include "metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstream {
namespace {

// Appends one metric family: its HELP and TYPE lines, then the samples added through it.
class Family {
 public:
  Family(std::string* out, const std::string& name, const char* type, const std::string& help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  Family& Sample(const std::string& labels, double value) {
    absl::StrAppend(out_, name_, labels.empty() ? "" : "{" + labels + "}", " ", absl::StrFormat("%.17g", value), "\n");
    return *this;
  }
  // A histogram's _bucket (cumulative, with le), _sum and _count samples.
  Family& Distribution(const std::string& labels, const Histogram& h) {
    const std::string sep = labels.empty() ? "" : labels + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      const std::string le = i < h.upper.size() ? absl::StrFormat("%g", h.upper[i]) : "+Inf";
      absl::StrAppend(out_, name_, "_bucket{", sep, "le=\"", le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(out_, name_, "_sum", labels.empty() ? "" : "{" + labels + "}", " ", absl::StrFormat("%.17g", h.sum),
                    "\n");
    absl::StrAppend(out_, name_, "_count", labels.empty() ? "" : "{" + labels + "}", " ", h.count, "\n");
    return *this;
  }

 private:
  std::string* out_;
  std::string name_;
};

std::string Tier(const TierStats& t) { return absl::StrCat("tier=\"", t.name, "\""); }

// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// One family with a sample per tier.
template <typename Get>
void PerTier(std::string* out, const StoreStats& s, const std::string& name, const char* type, const std::string& help,
             Get get) {
  Family f(out, name, type, help);
  for (const TierStats& t : s.tiers) f.Sample(Tier(t), static_cast<double>(get(t)));
}

// The counters of tier_counters.h: one family per metric name, a sample per tier and counter.
void TierCounterFamilies(std::string* out, const StoreStats& s) {
  for (size_t i = 0; i < std::size(kTierCounters); ++i) {
    const TierCounter& first = kTierCounters[i];
    bool seen = false;  // rendered with an earlier counter of the same metric
    for (size_t k = 0; k < i && !seen; ++k) seen = std::string_view(kTierCounters[k].metric) == first.metric;
    if (seen) continue;
    Family f(out, first.metric, "counter", first.help);
    for (const TierStats& t : s.tiers) {
      for (size_t k = i; k < std::size(kTierCounters); ++k) {
        const TierCounter& c = kTierCounters[k];
        if (std::string_view(c.metric) != first.metric) continue;
        const std::string labels = *c.labels == '\0' ? Tier(t) : absl::StrCat(Tier(t), ",", c.labels);
        f.Sample(labels, static_cast<double>(t.*c.field));
      }
    }
  }
}

}  // namespace

void ReadProcessGauges(DaemonGauges* g) {
  uint64_t size = 0, resident = 0;
  if (std::ifstream statm("/proc/self/statm"); statm >> size >> resident) {
    g->resident_bytes = resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  }
  // Field 22 of /proc/self/stat, after the command in parentheses (which may hold spaces).
  std::string stat;
  std::getline(std::ifstream("/proc/self/stat"), stat);
  uint64_t boot = 0;
  for (std::ifstream in("/proc/stat"); in;) {
    std::string word;
    in >> word;
    if (word == "btime") {
      in >> boot;
      break;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (const size_t close = stat.rfind(')'); close != std::string::npos && boot > 0) {
    std::istringstream fields(stat.substr(close + 2));  // field 3 onwards
    std::string field;
    for (int i = 3; i < 22 && fields >> field; ++i) {
    }
    uint64_t ticks = 0;
    if (fields >> ticks) g->start_time_seconds = static_cast<double>(boot) + static_cast<double>(ticks) / sysconf(_SC_CLK_TCK);
  }
  if (DIR* dir = opendir("/proc/self/fd")) {
    uint64_t n = 0;
    while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
    g->open_fds = n > 0 ? n - 1 : 0;  // less the directory's own descriptor
  }
}

std::string RenderMetrics(const StoreStats& s, const DaemonGauges& d, bool healthy, const std::string& version) {
  std::string out;
  Family(&out, "kvstream_build_info", "gauge", "The running kvstreamd's version.")
      .Sample(absl::StrCat("version=\"", version, "\""), 1);
  // Not `kvstream_up`: Prometheus's own `up` says whether the scrape worked; this says whether the
  // daemon is healthy, as /health does.
  Family(&out, "kvstream_healthy", "gauge",
         "1 when health is OK (tiers usable, none stalled, the I/O loop turning), as /health says.")
      .Sample("", healthy ? 1 : 0);

  {
    Family f(&out, "kvstream_tier_info", "gauge",
             "1 per tier (per drive of a tier over several drives): its group (the configured tier), "
             "directory and I/O engine.");
    for (const TierStats& t : s.tiers) {
      f.Sample(absl::StrCat(Tier(t), ",group=\"", LabelValue(t.group), "\",path=\"", LabelValue(t.path),
                            "\",io_engine=\"", t.io_engine, "\""),
               1);
    }
  }
  TierCounterFamilies(&out, s);
  {
    Family f(&out, "kvstream_tier_io_seconds", "histogram", "A block read's or a replica write's time per tier.");
    for (const TierStats& t : s.tiers) {
      f.Distribution(Tier(t) + ",op=\"read\"", t.read_seconds);
      f.Distribution(Tier(t) + ",op=\"write\"", t.write_seconds);
    }
  }
  PerTier(&out, s, "kvstream_tier_foreign_chunks", "gauge",
          "Indexed chunks other nodes published on a shared tier (not counted against this node's capacity).",
          [](const TierStats& t) { return t.foreign_chunks; });
  PerTier(&out, s, "kvstream_tier_discovered_total", "counter",
          "Keys the index lacked that were found on a shared tier's file system (published by another node).",
          [](const TierStats& t) { return t.discovered; });
  PerTier(&out, s, "kvstream_tier_stalled", "gauge", "1 while a read of the tier is past its deadline.",
          [](const TierStats& t) { return t.stalled; });
  PerTier(&out, s, "kvstream_tier_usable", "gauge", "1 when the tier can be read and written.",
          [](const TierStats& t) { return t.readable && t.writable; });
  PerTier(&out, s, "kvstream_tier_direct_io", "gauge", "1 with O_DIRECT, 0 with buffered I/O (page cache).",
          [](const TierStats& t) { return t.direct_io; });
  PerTier(&out, s, "kvstream_tier_capacity_bytes", "gauge", "Configured capacity per tier.",
          [](const TierStats& t) { return t.capacity_bytes; });
  PerTier(&out, s, "kvstream_tier_used_bytes", "gauge", "Bytes of chunk files per tier.",
          [](const TierStats& t) { return t.used_bytes; });
  PerTier(&out, s, "kvstream_tier_queue_depth", "gauge",
          "Reads in flight a tier takes now (queue_depth auto: the depth it found to pay).",
          [](const TierStats& t) { return t.queue_depth; });
  PerTier(&out, s, "kvstream_tier_chunks", "gauge", "Replicas per tier.", [](const TierStats& t) { return t.chunks; });
  PerTier(&out, s, "kvstream_tier_reference_bandwidth_bytes_per_second", "gauge",
          "Moving average of the bandwidth each tier achieved in steps.",
          [](const TierStats& t) { return t.reference_bandwidth_bps; });

  Family(&out, "kvstream_steps_total", "counter", "Steps retrieved.").Sample("", static_cast<double>(s.steps));
  Family(&out, "kvstream_step_seconds", "histogram", "Each step's retrieval time.").Distribution("", s.step_seconds);
  Family(&out, "kvstream_step_bound_seconds", "histogram", "Each step's bound: its bytes over the sum of its tiers' bandwidths.")
      .Distribution("", s.step_bound_seconds);
  Family(&out, "kvstream_step_gap_ratio", "histogram", "Each step's gap to its bound (time / bound - 1).")
      .Distribution("", s.step_gap);
  Family(&out, "kvstream_load_estimate_error_ratio", "histogram",
         "Each step's load estimate against its time: |estimate - time| / time.")
      .Distribution("", s.load_estimate_error);
  Family(&out, "kvstream_retrieved_chunks_total", "counter", "Chunks asked for, by result.")
      .Sample("result=\"hit\"", static_cast<double>(s.retrieve_hits))
      .Sample("result=\"miss\"", static_cast<double>(s.retrieve_misses))
      .Sample("result=\"failed\"", static_cast<double>(s.retrieve_failures));
  Family(&out, "kvstream_persists_total", "counter",
         "Chunks persisted, by result; ok: written to a tier (synced too only under fsync chunk: kvstream_fsync_policy).")
      .Sample("result=\"ok\"", static_cast<double>(s.persists - s.persist_failures))
      .Sample("result=\"failed\"", static_cast<double>(s.persist_failures));
  Family(&out, "kvstream_fsync_policy", "gauge",
         "1 for the fsync policy in force: chunk (persists synced: they survive a power cut) or none (written "
         "only: a power cut may lose them).")
      .Sample(absl::StrCat("policy=\"", std::string(ToString(s.fsync)), "\""), 1);
  Family(&out, "kvstream_chunks", "gauge", "Keys held by at least one tier.").Sample("", static_cast<double>(s.chunks));
  Family(&out, "kvstream_staged_bytes", "gauge", "Chunk images staged, not yet written to their tiers (the write backlog).")
      .Sample("", static_cast<double>(s.staged_bytes));
  Family(&out, "kvstream_staged_chunks", "gauge", "Chunks staged, not yet written to their tiers.")
      .Sample("", static_cast<double>(s.staged_chunks));
  Family(&out, "kvstream_staging_limit_bytes", "gauge", "The staging limit.")
      .Sample("", static_cast<double>(s.staging_limit_bytes));
  Family(&out, "kvstream_staging_kept_bytes", "gauge", "Staging memory kept for reuse, beyond what staged chunks hold.")
      .Sample("", static_cast<double>(s.staging_kept_bytes));
  Family(&out, "kvstream_write_stall_seconds_total", "counter", "Time persists waited for staging space.")
      .Sample("", s.write_stall_seconds);
  Family(&out, "kvstream_writes_under_pressure_total", "counter", "Writes issued while reads were pending.")
      .Sample("", static_cast<double>(s.writes_under_pressure));
  Family(&out, "kvstream_persists_dropped_total", "counter",
         "Persists dropped because staging was full (staging.when_full: drop).")
      .Sample("", static_cast<double>(s.persists_dropped));
  Family(&out, "kvstream_persist_dropped_bytes_total", "counter", "Bytes of the persists dropped.")
      .Sample("", static_cast<double>(s.persist_dropped_bytes));
  Family(&out, "kvstream_shared_copies_total", "counter",
         "Chunks read from another node's file on a shared tier and staged for this node's other tiers.")
      .Sample("", static_cast<double>(s.shared_copies));
  Family(&out, "kvstream_loop_lag_seconds", "gauge", "Since the I/O loop last went round.").Sample("", s.loop_lag_seconds);
  Family(&out, "process_cpu_seconds_total", "counter", "User and system CPU time of kvstreamd.")
      .Sample("", s.process_cpu_seconds);
  if (d.resident_bytes > 0) {
    Family(&out, "process_resident_memory_bytes", "gauge", "Resident memory of kvstreamd (arenas mapped by both sides included).")
        .Sample("", static_cast<double>(d.resident_bytes));
  }
  if (d.start_time_seconds > 0) {
    Family(&out, "process_start_time_seconds", "gauge", "When kvstreamd started, in seconds since the Unix epoch.")
        .Sample("", d.start_time_seconds);
  }
  if (d.open_fds > 0) {
    Family(&out, "process_open_fds", "gauge", "File descriptors kvstreamd has open.").Sample("", static_cast<double>(d.open_fds));
  }
  Family(&out, "kvstream_index_reconciling", "gauge",
         "1 while a saved index is checked against the tiers' files after a start.")
      .Sample("", s.reconciling ? 1.0 : 0.0);
  Family(&out, "kvstream_verify_threads", "gauge", "Threads verifying blocks off the I/O loop.")
      .Sample("", static_cast<double>(s.verify_threads));
  Family(&out, "kvstream_sessions", "gauge", "Attached client sessions.").Sample("", d.sessions);
  Family(&out, "kvstream_arena_bytes", "gauge", "Bytes of all sessions' arenas (pinned memory).")
      .Sample("", static_cast<double>(d.arena_bytes));
  Family(&out, "kvstream_arena_budget_bytes", "gauge", "sessions.arena_budget.")
      .Sample("", static_cast<double>(d.arena_budget_bytes));
  {
    Family f(&out, "kvstream_policy_info", "gauge", "The policies in force.");
    f.Sample(absl::StrCat("routing=\"", ToString(s.policies.routing), "\",batching=\"",
                          std::string(ToString(s.policies.batching)), "\",writes=\"",
                          std::string(ToString(s.policies.writes)), "\""),
             1);
  }
  return out;
}

}  // namespace kvstream
