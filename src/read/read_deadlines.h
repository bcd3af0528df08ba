// ReadDeadlines: the rules by which no step waits on one tier without bound (section 9 of
// docs/design.md), as pure logic over numbers. Per tier it keeps the observed read time and whether
// the tier answers, is stalled (a late read in flight) or is given up (stalled past reads.give_up).
// From them it says when a read is late, how long after its issue a late read's block is read again
// from another holder (a hedge), when a late read nobody else can take over fails its chunk,
// whether a tier leaves the last blocks of a step to the others, and whether a read of a slower
// tier is a straggler that an idle tier takes over.
//
// It has no clock, does no I/O and takes no lock: every time is passed in (ns of the reactor's
// clock), what it needs of the tiers is passed in as TierPace, and the loop thread owns it.
// read/step_reader.h applies its answers (abandons, reissues, fails chunks).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstream/config.h"

namespace kvstream {

// Where one read slot stands against its deadline: the one state of a slot (read/step_reader.h).
enum class ReadState : uint8_t {
  kFree,       // no read in flight
  kOnTime,     // in flight, not past its tier's deadline yet
  kHedgeDue,   // late: its block is read again from another holder once HedgeAfter has passed
  kGiveUpDue,  // late, no other holder could take it over: at GiveUpAt it is given up (or read elsewhere)
  kLate,       // late, nothing left to decide: taken over, given up, or waited for until it lands
};
// Whether a read in this state is past its deadline (its tier is stalled until it lands).
constexpr bool IsLate(ReadState s) { return s >= ReadState::kHedgeDue; }

// Whether a tier answers its reads.
enum class TierStall : uint8_t {
  kAnswering,  // no late read in flight
  kStalled,    // a late read in flight: it claims no new reads until every late one has landed
  kGivenUp,    // stalled past reads.give_up: it holds no chunk of a step until it answers
};

// What the rules read of each tier besides what they keep themselves, as it is now (the reader
// fills it from its Tier and its read slots).
struct TierPace {
  double reference_bps = 0;  // its bandwidth in steps (Tier::reference_bps); 0 before measured
  bool readable = true;      // its directory can be read (Tier::readable)
  uint32_t in_flight = 0;    // its reads in flight
};

class ReadDeadlines {
 public:
  // Rules for `tiers` tiers under `config` (block_size, read_deadline_*, read_give_up_seconds),
  // which must outlive this. Every tier starts unmeasured and answering.
  ReadDeadlines(const StoreConfig& config, size_t tiers);

  // --- Observed read time.
  // A read of `t` landed `took_ns` after its issue: the tier's usual read time moves toward it.
  void Observe(int t, int64_t took_ns);
  // The tier's usual read time from issue to completion (a moving average); 0 before a read landed.
  double read_ns(int t) const { return tiers_[t].read_ns; }
  // How long `t` takes for one block: from its bandwidth in steps (smooth), else its read time;
  // 0 before either is measured.
  double BlockNs(int t, const TierPace& pace) const;

  // --- Per-block deadline.
  // How long a read of `t` may be in flight before it is late: 4x the tier's usual read time,
  // clamped to reads.deadline's floor and cap; the cap while the tier is unmeasured.
  int64_t Deadline(int t) const;

  // --- Stall.
  TierStall stall(int t) const { return tiers_[t].stall; }
  bool stalled(int t) const { return tiers_[t].stall != TierStall::kAnswering; }
  // When the tier's first late read in flight became late. REQUIRES: stalled(t).
  int64_t stalled_since_ns(int t) const { return tiers_[t].stalled_since_ns; }
  // Late reads of `t` in flight.
  uint32_t late_reads(int t) const { return tiers_[t].late; }
  // A read of `t` became late at `now`: returns whether the tier stalls with it (its first).
  bool ReadLate(int t, int64_t now);
  // A late read of `t` landed: returns whether the tier answers again (it was the last one).
  // REQUIRES: late_reads(t) > 0.
  bool LateReadLanded(int t);

  // --- Give up (reads.give_up; 0 turns it off).
  bool gives_up() const { return config_.read_give_up_seconds > 0; }
  // When a late read issued at `issued_ns` that no other holder can take over fails its chunk.
  int64_t GiveUpAt(int64_t issued_ns) const { return issued_ns + give_up_ns(); }
  // A tier stalled for reads.give_up is given up even when its late reads were all taken over:
  // chunks only it holds would otherwise wait for it without bound. Returns whether `t` is given
  // up at `now` for the first time; while it is stalled and not yet given up, lowers `*next` to
  // when it will be.
  bool GiveUpIfStalledTooLong(int t, int64_t now, int64_t* next);
  // A late read of `t` reached GiveUpAt: the tier is given up, whether that read was abandoned or
  // could still be taken over or waited for. Returns whether it was not given up before.
  // REQUIRES: stalled(t).
  bool GiveUp(int t);
  bool given_up(int t) const { return tiers_[t].stall == TierStall::kGivenUp; }
  // The tiers given up now, as a mask.
  uint32_t given_up_mask() const;

  // --- Hedge delay.
  // How long after its issue a late read of `t` has its block read again from another holder in
  // `others` (a tier mask): the tier's deadline, or the time the fastest of them that answers and
  // can be read needs for a block if that is longer (reading it again from a much slower tier
  // finishes later than a tier that is only briefly late). `pace` has one entry per tier.
  int64_t HedgeAfter(int t, uint32_t others, std::span<const TierPace> pace) const;

  // --- The end of a step under completion routing.
  // Whether `t` leaves a block it just claimed to the other holders in `others`: they would read
  // what they have in flight, `unclaimed` blocks and this one before a read of `t` issued now
  // would land (its usual read time). Never while `t` has nothing in flight (its read time stays
  // measured, and a step never waits on an estimate alone), nor while a holder that answers and
  // can be read has no bandwidth measured yet.
  bool LeavesToOthers(int t, uint32_t others, uint64_t unclaimed, std::span<const TierPace> pace) const;
  // Whether the read of `t` issued at `issued_ns` is, at `now`, a straggler that an idle tier
  // reading a block in `taker_block_ns` takes over: it lands much later than that tier could read
  // it (by t's usual read time), or it is overdue (in flight twice t's usual time, and much
  // longer than the idle tier needs). When it is not (yet), lowers `*recheck` to when it would be
  // overdue. Never while `t` is unmeasured.
  bool Straggles(int t, int64_t issued_ns, double taker_block_ns, int64_t now, int64_t* recheck) const;

 private:
  struct TierTiming {
    double read_ns = 0;   // moving average of a read's time from issue to completion
    uint32_t late = 0;    // late reads in flight: the tier is stalled while > 0
    TierStall stall = TierStall::kAnswering;
    int64_t stalled_since_ns = 0;
  };

  int64_t give_up_ns() const { return static_cast<int64_t>(config_.read_give_up_seconds * 1e9); }

  const StoreConfig& config_;
  std::vector<TierTiming> tiers_;
};

}  // namespace kvstream
