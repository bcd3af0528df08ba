// StepReader's deadlines and hedges: no step waits on one tier without bound (read/step_reader.h).
// The rules are ReadDeadlines' (read/read_deadlines.h); here the reader acts on them: a read slot
// moves through its ReadState, a late read stalls its tier, a hedge abandons a read and reissues
// its block, a give-up fails a chunk, and a tier leaves or takes over the last blocks of a step.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "read/step_reader.h"
#include "spdlog/spdlog.h"

namespace kvstream {

std::span<const TierPace> StepReader::Pace() {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    pace_[t] = {tiers_[t]->reference_bps, tiers_[t]->readable,
                static_cast<uint32_t>(reads_[t].slots.size() - reads_[t].free.size())};
  }
  return pace_;
}

int64_t StepReader::HedgeAfter(int t, const ReadSlot& slot) {
  const auto* step = static_cast<const ReadStep*>(slot.ref.step);
  const uint32_t others = step->chunks[step->blocks[slot.ref.block].chunk].holders & ~(1u << t);
  return deadlines_.HedgeAfter(t, others, Pace());
}

void StepReader::MaybeHedge(int t, ReadSlot* slot, int64_t now) {
  auto* step = static_cast<ReadStep*>(slot->ref.step);
  if (step->blocks[slot->ref.block].state != BlockState::kInFlight) {
    slot->state = ReadState::kLate;
    return;
  }
  if (now - slot->issued_ns < HedgeAfter(t, *slot)) {
    slot->state = ReadState::kHedgeDue;  // another holder would take longer than the late read might
    return;
  }
  slot->state = ReadState::kLate;
  if (Hedge(t, slot)) return;
  const bool give_up = deadlines_.gives_up();
  if (give_up) slot->state = ReadState::kGiveUpDue;
  if (deadlines_.late_reads(t) == 1) {
    spdlog::warn("tier {}: the late read of '{}' cannot be taken over (no other holder, or it reads straight into "
                 "memory the store cannot take back); {}",
                 tiers_[t]->name, step->reads[step->blocks[slot->ref.block].chunk].request.key,
                 give_up ? absl::StrCat("its chunk fails if it has not landed ", config_.read_give_up_seconds,
                                        " s after it was issued (reads.give_up)")
                         : std::string("its step waits for it"));
  }
}

void StepReader::GiveUp(int t, ReadSlot* slot) {
  slot->state = ReadState::kLate;
  auto* step = static_cast<ReadStep*>(slot->ref.step);
  const StepBlock& blk = step->blocks[slot->ref.block];
  if (blk.state != BlockState::kInFlight) return;
  const uint32_t chunk = blk.chunk;
  Tier& tier = *tiers_[t];
  if (step->chunks[chunk].holders & ~(1u << t)) {
    // Another tier holds the chunk after all (its hedge failed only because the memory could not
    // be taken back then): read it there if that is safe now; else the step waits for this read.
    Hedge(t, slot);
    return;
  }
  const bool safe = MayAbandon(t, slot);
  if (!safe) {
    spdlog::warn("tier {}: the late read of '{}' cannot be given up (it reads straight into memory the store cannot "
                 "take back); its step waits for it",
                 tier.name, step->reads[chunk].request.key);
    return;
  }
  tier.device->Abandon(slot);
  pool_->Abandon(slot->ref, t);
  ++tier.counters.given_up_reads;
  ReadChunk& c = step->reads[chunk];
  c.real_failure = true;
  c.error = GivenUpWhy(t);
  uint64_t left_out;
  if (tier.read_log.Allow(&left_out)) {
    spdlog::warn("tier {}: gave up the read of '{}' after {} s (no other tier holds it); the chunk fails{}", tier.name,
                 c.request.key, config_.read_give_up_seconds,
                 left_out ? absl::StrCat(" (", left_out, " more read failures not logged)") : "");
  }
  Settle(step, chunk);
}

std::string StepReader::GivenUpWhy(int t) const {
  return absl::StrCat("tier ", tiers_[t]->name, " has not answered a read in ", config_.read_give_up_seconds,
                      " s and no other tier holds the chunk");
}

void StepReader::DropGivenUpTiers(Step* only) {
  std::vector<std::pair<Step*, uint32_t>> failing;
  for (size_t t = 0; t < reads_.size(); ++t) {
    if (!deadlines_.given_up(static_cast<int>(t))) continue;
    const size_t first = failing.size();
    pool_->DropTier(static_cast<int>(t), only, &failing);
    for (size_t i = first; i < failing.size(); ++i) {
      ReadChunk& c = static_cast<ReadStep*>(failing[i].first)->reads[failing[i].second];
      if (c.error.empty()) c.error = GivenUpWhy(static_cast<int>(t));
      c.real_failure = true;
    }
  }
  // Settled once all are marked: settling the last failing chunk of a step finishes (frees) it.
  for (auto [s, chunk] : failing) Settle(static_cast<ReadStep*>(s), chunk);
}

uint64_t StepReader::PublishLoad() {
  uint64_t in_flight = 0;
  for (size_t t = 0; t < reads_.size(); ++t) {
    int64_t oldest = 0;
    for (const ReadSlot& slot : reads_[t].slots) {
      if (slot.state == ReadState::kFree) continue;
      ++in_flight;
      if (oldest == 0 || slot.issued_ns < oldest) oldest = slot.issued_ns;
    }
    tiers_[t]->oldest_read_ns.store(oldest, std::memory_order_relaxed);
    tiers_[t]->usual_read_seconds.store(deadlines_.read_ns(static_cast<int>(t)) / 1e9, std::memory_order_relaxed);
  }
  return in_flight;
}

int64_t StepReader::CheckDeadlines() {
  const int64_t now = reactor_->NowNs();
  int64_t next = kNoDeadline;
  bool newly_given_up = false;
  for (size_t i = 0; i < reads_.size(); ++i) {
    const int t = static_cast<int>(i);
    newly_given_up |= deadlines_.GiveUpIfStalledTooLong(t, now, &next);
    const int64_t deadline = deadlines_.Deadline(t);
    for (ReadSlot& slot : reads_[t].slots) {
      switch (slot.state) {
        case ReadState::kFree:
        case ReadState::kLate:
          break;
        case ReadState::kOnTime:
          if (now - slot.issued_ns >= deadline) {
            ReadLate(t, &slot, now);
          } else {
            next = std::min(next, slot.issued_ns + deadline);
          }
          break;
        case ReadState::kHedgeDue:
          MaybeHedge(t, &slot, now);
          if (slot.state == ReadState::kHedgeDue) next = std::min(next, slot.issued_ns + HedgeAfter(t, slot));
          break;
        case ReadState::kGiveUpDue:
          if (const int64_t at = deadlines_.GiveUpAt(slot.issued_ns); now >= at) {
            GiveUp(t, &slot);
            newly_given_up |= deadlines_.GiveUp(t);
          } else {
            next = std::min(next, at);
          }
          break;
      }
    }
  }
  if (newly_given_up) DropGivenUpTiers(nullptr);  // after the loop: it may finish steps
  return next;
}

void StepReader::ReadLate(int t, ReadSlot* slot, int64_t now) {
  Tier& tier = *tiers_[t];
  slot->state = ReadState::kLate;  // MaybeHedge says what is left to decide
  if (deadlines_.ReadLate(t, now)) {
    tier.stalled = true;
    ++tier.counters.stalls;
    pool_->ReleasePins(t);  // static or fastest routing must not leave blocks waiting for it
    spdlog::warn("tier {}: a read has been in flight for {} ms (deadline {} ms): stalled, it claims no new reads "
                 "until it answers",
                 tier.name, (now - slot->issued_ns) / 1'000'000, deadlines_.Deadline(t) / 1'000'000);
  }
  ++tier.counters.late_reads;
  MaybeHedge(t, slot, now);
}

void StepReader::ReadLanded(int t, ReadSlot* slot, int64_t now) {
  const int64_t took = now - slot->issued_ns;
  deadlines_.Observe(t, took);
  tiers_[t]->counters.read_seconds.Observe(static_cast<double>(took) / 1e9);
  const bool late = IsLate(slot->state);
  slot->state = ReadState::kFree;
  if (!late) return;
  const int64_t stalled_since = deadlines_.stalled_since_ns(t);  // a late read in flight: stalled
  if (deadlines_.LateReadLanded(t)) {
    tiers_[t]->stalled = false;
    spdlog::info("tier {}: answers again after {} ms", tiers_[t]->name, (now - stalled_since) / 1'000'000);
  }
}

bool StepReader::MayAbandon(int t, ReadSlot* slot) {
  return slot->buffer != slot->dst || tiers_[t]->device->properties().abandon_is_final ||
         regions_->TakeBack(t, slot->region, static_cast<uint8_t*>(slot->buffer), slot->length);
}

bool StepReader::Hedge(int t, ReadSlot* slot) {
  auto* step = static_cast<ReadStep*>(slot->ref.step);
  const StepChunk& chunk = step->chunks[step->blocks[slot->ref.block].chunk];
  if ((chunk.holders & ~(1u << t)) == 0) return false;
  // The abandoned read must not be seen: it lands in the slot's bounce buffer (taken until then),
  // or in registered memory the store takes back from it.
  if (!MayAbandon(t, slot)) return false;
  tiers_[t]->device->Abandon(slot);
  pool_->Reissue(slot->ref, t);
  ++tiers_[t]->counters.hedged_reads;
  tiers_[t]->counters.hedged_bytes += slot->payload;
  return true;
}

bool StepReader::HedgeTail(int h, int64_t* recheck) {
  const double block_ns = deadlines_.BlockNs(h, Pace()[h]);
  if (block_ns == 0) return false;  // no measure of this tier yet
  const int64_t now = reactor_->NowNs();
  int best_tier = -1;
  ReadSlot* best = nullptr;
  for (size_t i = 0; i < reads_.size(); ++i) {
    const int t = static_cast<int>(i);
    if (t == h) continue;
    for (ReadSlot& slot : reads_[t].slots) {
      if (slot.state != ReadState::kOnTime) continue;
      auto* step = static_cast<ReadStep*>(slot.ref.step);
      // Only completion routing spreads a step over every tier: the fixed splits and the
      // single-tier policies are references, read as they say.
      if (step->policies.routing.kind != RoutingKind::kCompletion) continue;
      const StepBlock& blk = step->blocks[slot.ref.block];
      if (blk.state != BlockState::kInFlight || !(step->chunks[blk.chunk].holders & (1u << h))) continue;
      if (!deadlines_.Straggles(t, slot.issued_ns, block_ns, now, recheck)) continue;
      if (best == nullptr || slot.issued_ns < best->issued_ns) {
        best_tier = t;
        best = &slot;
      }
    }
  }
  if (best == nullptr || !Hedge(best_tier, best)) return false;
  spdlog::debug("tier {}: takes over a straggler of tier {} in flight for {} ms", tiers_[h]->name,
                tiers_[best_tier]->name, (now - best->issued_ns) / 1'000'000);
  return true;
}

bool StepReader::LeavesToOthers(int t, BlockRef ref) {
  const auto* step = static_cast<const ReadStep*>(ref.step);
  if (step->policies.routing.kind != RoutingKind::kCompletion) return false;
  const uint32_t others = step->chunks[step->blocks[ref.block].chunk].holders & ~(1u << t);
  return deadlines_.LeavesToOthers(t, others, pool_->unclaimed(), Pace());
}

}  // namespace kvstream
