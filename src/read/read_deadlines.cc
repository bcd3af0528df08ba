#include "read/read_deadlines.h"

#include <algorithm>

namespace kvstream {
namespace {

constexpr double kDeadlineFactor = 4;      // a read is late past this many times its tier's usual time
constexpr double kReadTimeWeight = 0.25;   // of a new read in its tier's moving average
constexpr double kTailFactor = 4;          // a straggler lands this many of the idle tier's blocks late,
constexpr double kTailFloorNs = 10e6;      // and at least this late (healthy tiers' last blocks stay)

}  // namespace

ReadDeadlines::ReadDeadlines(const StoreConfig& config, size_t tiers) : config_(config), tiers_(tiers) {}

void ReadDeadlines::Observe(int t, int64_t took_ns) {
  const double took = static_cast<double>(took_ns);
  double& usual = tiers_[t].read_ns;
  usual = usual == 0 ? took : (1 - kReadTimeWeight) * usual + kReadTimeWeight * took;
}

double ReadDeadlines::BlockNs(int t, const TierPace& pace) const {
  return pace.reference_bps > 0 ? config_.block_size / pace.reference_bps * 1e9 : tiers_[t].read_ns;
}

int64_t ReadDeadlines::Deadline(int t) const {
  const double floor = config_.read_deadline_floor_seconds * 1e9, cap = config_.read_deadline_cap_seconds * 1e9;
  const double usual = tiers_[t].read_ns;
  return static_cast<int64_t>(usual == 0 ? cap : std::clamp(kDeadlineFactor * usual, floor, cap));
}

bool ReadDeadlines::ReadLate(int t, int64_t now) {
  TierTiming& tier = tiers_[t];
  if (tier.late++ > 0) return false;
  tier.stall = TierStall::kStalled;
  tier.stalled_since_ns = now;
  return true;
}

bool ReadDeadlines::LateReadLanded(int t) {
  TierTiming& tier = tiers_[t];
  if (--tier.late > 0) return false;
  tier.stall = TierStall::kAnswering;  // given up or not: it answers again
  return true;
}

bool ReadDeadlines::GiveUpIfStalledTooLong(int t, int64_t now, int64_t* next) {
  const TierTiming& tier = tiers_[t];
  if (give_up_ns() <= 0 || tier.stall != TierStall::kStalled) return false;
  const int64_t at = tier.stalled_since_ns + give_up_ns();
  if (now >= at) return GiveUp(t);
  *next = std::min(*next, at);
  return false;
}

bool ReadDeadlines::GiveUp(int t) {
  TierTiming& tier = tiers_[t];
  if (tier.stall == TierStall::kGivenUp) return false;
  tier.stall = TierStall::kGivenUp;
  return true;
}

uint32_t ReadDeadlines::given_up_mask() const {
  uint32_t mask = 0;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t].stall == TierStall::kGivenUp) mask |= 1u << t;
  }
  return mask;
}

int64_t ReadDeadlines::HedgeAfter(int t, uint32_t others, std::span<const TierPace> pace) const {
  double fastest = -1;  // ns the fastest other holder that can read needs for a block
  for (size_t h = 0; h < tiers_.size(); ++h) {
    if (!(others & (1u << h)) || tiers_[h].late > 0 || !pace[h].readable) continue;
    const double block_ns = BlockNs(static_cast<int>(h), pace[h]);
    if (fastest < 0 || block_ns < fastest) fastest = block_ns;
  }
  return std::max(Deadline(t), static_cast<int64_t>(std::max(0.0, fastest)));
}

bool ReadDeadlines::LeavesToOthers(int t, uint32_t others, uint64_t unclaimed, std::span<const TierPace> pace) const {
  if (pace[t].in_flight == 0) return false;
  const double own_ns = tiers_[t].read_ns;  // when a read of `t` issued now would land
  if (own_ns == 0 || others == 0) return false;
  double blocks_per_ns = 0;  // of the other holders together
  size_t in_flight = 0;
  for (size_t h = 0; h < tiers_.size(); ++h) {
    if (!(others & (1u << h)) || tiers_[h].late > 0 || !pace[h].readable) continue;
    const double bps = pace[h].reference_bps;
    if (bps <= 0) return false;  // not measured yet
    blocks_per_ns += bps / 1e9 / config_.block_size;
    in_flight += pace[h].in_flight;
  }
  if (blocks_per_ns == 0) return false;
  // They read what they have in flight, every block still unclaimed and this one before it would land.
  const double others_done_ns = static_cast<double>(in_flight + unclaimed + 1) / blocks_per_ns;
  return others_done_ns <= own_ns;
}

bool ReadDeadlines::Straggles(int t, int64_t issued_ns, double taker_block_ns, int64_t now, int64_t* recheck) const {
  const double usual = tiers_[t].read_ns;
  const double margin = std::max(kTailFactor * taker_block_ns, kTailFloorNs);
  const double age = static_cast<double>(now - issued_ns);
  const double overdue = std::max(2 * usual, margin);
  const bool straggles = usual > 0 && (usual - age > margin || age > overdue);
  // Nothing lands from that tier meanwhile, perhaps: look again when it is overdue.
  if (!straggles && usual > 0) *recheck = std::min(*recheck, issued_ns + static_cast<int64_t>(overdue) + 1);
  return straggles;
}

}  // namespace kvstream
