#include "nodes.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <queue>
#include <tuple>

#include "model.h"

namespace kvsim {
namespace {

// The most one node takes from the PFS.
double PfsMax(const Cluster& c) {
  return c.pfs_node_cap_bps > 0 ? std::min(c.pfs_node_cap_bps, c.pfs_bps) : c.pfs_bps;
}

// What one of `readers` nodes reading the PFS at once gets.
double PfsShare(const Cluster& c, size_t readers) {
  return readers == 0 ? 0 : std::min(PfsMax(c), c.pfs_bps / static_cast<double>(readers));
}

// splitmix64: a fully specified generator, so results do not depend on the standard library.
uint64_t Next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A block claimed by a tier. An orphan was taken over by the other tier: it still occupies its
// slot and the PFS until it lands (an O_DIRECT read cannot be withdrawn), but no step waits for it.
struct Claim {
  double size;
  bool orphan = false;
};

// One tier of one node: its claims in order; the head is being transferred.
struct Tier {
  std::deque<Claim> claimed;
  double head_done = 0;  // NVMe: the time the head lands; PFS: the value of the PFS clock V when it lands
  size_t live = 0;       // claims that are not orphans
};

struct NodeState {
  uint64_t rng = 0;
  bool reading = false;
  // The step in progress.
  double step_start = 0;
  uint64_t blocks = 0, next = 0;
  double last = 0;      // size of the step's last block
  double step_pfs = 0;  // bytes of the step the PFS tier reads
  double avail = 0;     // integral over the step of the PFS share it would get (see v_mark)
  double v_mark = 0, a_mark = 0;  // V and A (below) when avail was last brought up to date
  Tier nvme, pfs;
  // Totals over completed steps.
  uint64_t steps = 0, takeovers = 0;
  double step_time = 0, bound_time = 0, bytes = 0, pfs_bytes = 0;
};

}  // namespace

double SoloStepTime(const Cluster& c, size_t i) {
  const NodeLoad& n = c.nodes[i];
  return CompletionTime(n.step_bytes, c.block_bytes, c.queue_depth, {n.nvme_bps, PfsMax(c)}, {}, nullptr, c.takeover);
}

double GapForLoad(const Cluster& c, size_t i, double load) { return SoloStepTime(c, i) * (1 / load - 1); }

// Every node reading the PFS gets the same share, so one clock serves them all: V, the bytes one
// reader has received since the start (dV/dt = share). A PFS head that starts at V0 lands when V
// reaches V0 + size, whatever the sharing does meanwhile, so events cost O(log n): a heap of
// real-time events (NVMe heads, step starts) and a heap of PFS heads in V.
ClusterResult SimulateCluster(const Cluster& c) {
  const size_t n = c.nodes.size();
  ClusterResult out;
  if (n == 0) return out;
  double window = c.window_s;
  if (window <= 0) {
    for (size_t i = 0; i < n; ++i) window = std::max(window, 200 * (SoloStepTime(c, i) + c.nodes[i].gap_s));
  }
  out.window_s = window;
  std::vector<NodeState> s(n);
  using Event = std::tuple<double, int, size_t>;  // (time or V, kind, node)
  constexpr int kNvmeDone = 0, kStart = 1;        // at one instant NVMe heads land before steps start
  std::priority_queue<Event, std::vector<Event>, std::greater<>> timed, pfs_heads;
  double t = 0, v = 0;
  double a = 0;        // A: integral of the share one more reader would get
  size_t readers = 0;  // nodes with a PFS read in flight, orphans included
  double pfs_bytes = 0, pfs_busy = 0, reading_time = 0;
  std::vector<size_t> tails;  // reading nodes with nothing left to claim: takeover candidates

  auto draw_gap = [&](size_t i) {
    const double mean = c.nodes[i].gap_s;
    if (mean <= 0 || c.gaps == GapDistribution::kFixed) return mean;
    const double u = static_cast<double>(Next(s[i].rng) >> 11) * 0x1p-53;  // [0, 1)
    return -mean * std::log1p(-u);
  };
  // Brings node i's avail up to now; call before its PFS tier empties or fills.
  auto mark = [&](NodeState& ns) {
    if (ns.reading) ns.avail += ns.pfs.claimed.empty() ? a - ns.a_mark : v - ns.v_mark;
    ns.v_mark = v;
    ns.a_mark = a;
  };
  auto push = [&](size_t i, bool to_pfs, double size) {
    NodeState& ns = s[i];
    Tier& tier = to_pfs ? ns.pfs : ns.nvme;
    if (tier.claimed.empty()) {
      if (to_pfs) {
        mark(ns);
        ++readers;
        tier.head_done = v + size;
        pfs_heads.emplace(tier.head_done, 0, i);
      } else {
        tier.head_done = t + size / c.nodes[i].nvme_bps;
        timed.emplace(tier.head_done, kNvmeDone, i);
      }
    }
    tier.claimed.push_back({size});
    ++tier.live;
    if (to_pfs) ns.step_pfs += size;
  };
  auto claim = [&](size_t i, bool to_pfs) {
    NodeState& ns = s[i];
    push(i, to_pfs, ns.next + 1 == ns.blocks ? ns.last : c.block_bytes);
    if (++ns.next == ns.blocks) tails.push_back(i);
  };
  auto start_step = [&](size_t i) {
    NodeState& ns = s[i];
    const double d = c.nodes[i].step_bytes;
    mark(ns);
    ns.reading = true;
    ns.step_start = t;
    ns.blocks = static_cast<uint64_t>(std::ceil(d / c.block_bytes));
    ns.last = d - static_cast<double>(ns.blocks - 1) * c.block_bytes;
    ns.next = 0;
    ns.step_pfs = 0;
    ns.avail = 0;
    while (ns.nvme.claimed.size() < c.queue_depth && ns.next < ns.blocks) claim(i, false);
    // Orphans of the previous step still hold PFS slots.
    while (PfsMax(c) > 0 && ns.pfs.claimed.size() < c.queue_depth && ns.next < ns.blocks) claim(i, true);
  };
  // A step is done when nothing is left to claim and none of its claims is in flight (orphans aside).
  auto maybe_done = [&](size_t i) {
    NodeState& ns = s[i];
    if (!ns.reading || ns.next < ns.blocks || ns.nvme.live > 0 || ns.pfs.live > 0) return;
    mark(ns);
    const double d = c.nodes[i].step_bytes, elapsed = t - ns.step_start;
    ++ns.steps;
    ns.step_time += elapsed;
    reading_time += elapsed;
    ns.avail += c.nodes[i].nvme_bps * elapsed;
    ns.bound_time += ns.avail > 0 ? d * elapsed / ns.avail : 0;
    ns.bytes += d;
    ns.pfs_bytes += ns.step_pfs;
    ns.reading = false;
    tails.erase(std::find(tails.begin(), tails.end(), i));
    timed.emplace(t + draw_gap(i), kStart, i);
  };
  // At the end of a step the PFS tier leaves the next block to the NVMe when the NVMe would read
  // what it has claimed and every unclaimed block, that one included, before a PFS read claimed
  // now would land at the present share; never while it has nothing in flight (as the daemon).
  auto pfs_leaves = [&](size_t i) {
    const NodeState& ns = s[i];
    if (!c.takeover || ns.pfs.claimed.empty()) return false;
    const double size = ns.next + 1 == ns.blocks ? ns.last : c.block_bytes;
    double ahead = ns.pfs.head_done - v;  // PFS bytes (per reader) until its last claim lands
    for (size_t j = 1; j < ns.pfs.claimed.size(); ++j) ahead += ns.pfs.claimed[j].size;
    const double lands = (ahead + size) / PfsShare(c, readers);
    double nvme_bytes = static_cast<double>(ns.blocks - ns.next - 1) * c.block_bytes + ns.last;  // unclaimed
    for (size_t j = 1; j < ns.nvme.claimed.size(); ++j) nvme_bytes += ns.nvme.claimed[j].size;
    const double nvme_head = ns.nvme.claimed.empty() ? 0 : ns.nvme.head_done - t;
    return nvme_head + nvme_bytes / c.nodes[i].nvme_bps <= lands;
  };
  // A head landed: the next claim takes its slot.
  auto landed = [&](size_t i, bool from_pfs) {
    NodeState& ns = s[i];
    Tier& tier = from_pfs ? ns.pfs : ns.nvme;
    if (from_pfs) mark(ns);  // its PFS tier may empty
    if (!tier.claimed.front().orphan) --tier.live;
    tier.claimed.pop_front();
    if (!tier.claimed.empty()) {
      const double size = tier.claimed.front().size;
      if (from_pfs) {
        tier.head_done = v + size;
        pfs_heads.emplace(tier.head_done, 0, i);
      } else {
        tier.head_done = t + size / c.nodes[i].nvme_bps;
        timed.emplace(tier.head_done, kNvmeDone, i);
      }
    } else if (from_pfs) {
      --readers;
    }
    if (ns.reading && ns.next < ns.blocks && !(from_pfs && pfs_leaves(i))) claim(i, from_pfs);
    maybe_done(i);
  };
  // At the end of a step, the NVMe tier, with room and nothing left to claim, takes over the PFS
  // blocks that would land, at the present share, more than max(4 NVMe block times, 10 ms) from
  // now: the latest first (docs/design-notes.md, "Deadlines, stalls and hedged reads").
  auto take_over = [&](size_t i, double share) {
    NodeState& ns = s[i];
    Tier& pfs = ns.pfs;
    if (pfs.live == 0 || ns.nvme.claimed.size() >= c.queue_depth) return;
    const double threshold = std::max(4 * c.block_bytes / c.nodes[i].nvme_bps, 0.01);
    double ahead = pfs.head_done - v;  // PFS bytes (per reader) until the last claim lands
    for (size_t j = 1; j < pfs.claimed.size(); ++j) ahead += pfs.claimed[j].size;
    for (size_t j = pfs.claimed.size(); j-- > 0 && ns.nvme.claimed.size() < c.queue_depth;) {
      Claim& b = pfs.claimed[j];
      const double lands = ahead / share;  // seconds from now
      if (j > 0) ahead -= b.size;
      if (b.orphan) continue;
      if (lands <= threshold) break;
      b.orphan = true;
      --pfs.live;
      ns.step_pfs -= b.size;
      ++ns.takeovers;
      push(i, false, b.size);
    }
  };

  for (size_t i = 0; i < n; ++i) {
    s[i].rng = c.seed ^ (0xD1B54A32D192ED03ull * (i + 1));
    // Fixed gaps: node i starts i/n of its gap in, so equal nodes do not start in lockstep.
    timed.emplace(c.gaps == GapDistribution::kFixed ? c.nodes[i].gap_s * static_cast<double>(i) / n : draw_gap(i),
                  kStart, i);
  }
  const double v_tolerance = 1e-9 * c.block_bytes;  // PFS heads this close to V land together
  while (true) {
    const double share = PfsShare(c, readers);
    if (c.takeover) {
      for (size_t i : tails) take_over(i, share);  // pushes to NVMe tiers only: tails stays as it is
    }
    double next_t = window;
    bool pfs_next = false;
    if (!timed.empty()) next_t = std::min(next_t, std::get<0>(timed.top()));
    if (!pfs_heads.empty() && readers > 0) {
      const double when = t + std::max(0.0, std::get<0>(pfs_heads.top()) - v) / share;
      if (when < next_t) {
        next_t = when;
        pfs_next = true;
      }
    }
    const double dt = std::max(0.0, next_t - t);
    v = pfs_next ? std::max(v, std::get<0>(pfs_heads.top())) : v + share * dt;
    a += PfsShare(c, readers + 1) * dt;
    pfs_bytes += share * static_cast<double>(readers) * dt;
    if (readers > 0) pfs_busy += dt;
    t = next_t;
    if (t >= window) break;
    while (!timed.empty() && std::get<0>(timed.top()) <= t) {
      const auto [when_unused, kind, i] = timed.top();
      timed.pop();
      if (kind == kStart) {
        start_step(i);
      } else {
        landed(i, false);
      }
    }
    while (!pfs_heads.empty() && std::get<0>(pfs_heads.top()) <= v + v_tolerance) {
      const size_t i = std::get<2>(pfs_heads.top());
      pfs_heads.pop();
      landed(i, true);
    }
  }

  out.pfs_bytes_per_s = pfs_bytes / window;
  out.pfs_busy = pfs_busy / window;
  for (size_t i = 0; i < n; ++i) {
    const NodeState& ns = s[i];
    const NodeLoad& load = c.nodes[i];
    NodeResult r;
    r.steps = ns.steps;
    r.takeovers = ns.takeovers;
    r.solo_s = SoloStepTime(c, i);
    r.nvme_only_s = load.step_bytes / load.nvme_bps;
    r.busy = (ns.step_time + (ns.reading ? window - ns.step_start : 0)) / window;
    r.nvme_only_bytes_per_s = load.step_bytes / (r.nvme_only_s + load.gap_s);
    if (ns.steps > 0) {
      r.step_s = ns.step_time / ns.steps;
      r.bound_s = ns.bound_time / ns.steps;
      r.gap = r.bound_s > 0 ? r.step_s / r.bound_s - 1 : 0;
      r.pfs_share = ns.pfs_bytes / ns.bytes;
      r.pfs_bps_reading = ns.step_time > 0 ? ns.pfs_bytes / ns.step_time : 0;
      r.bytes_per_s = load.step_bytes / (r.step_s + load.gap_s);
    }
    out.bytes_per_s += r.bytes_per_s;
    out.nvme_only_bytes_per_s += r.nvme_only_bytes_per_s;
    out.nodes.push_back(r);
  }
  out.ratio = out.nvme_only_bytes_per_s > 0 ? out.bytes_per_s / out.nvme_only_bytes_per_s : 0;
  return out;
}

}  // namespace kvsim
