// StepReader's deadlines and hedges: no step waits on one tier without bound (read/step_reader.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "read/step_reader.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

constexpr double kDeadlineFactor = 4;      // a read is late past this many times its tier's usual time
constexpr double kReadTimeWeight = 0.25;   // of a new read in its tier's moving average
constexpr double kTailFactor = 4;          // a straggler lands this many of the idle tier's blocks late,
constexpr double kTailFloorNs = 10e6;      // and at least this late (healthy tiers' last blocks stay)

}  // namespace

double StepReader::BlockNs(int t) const {
  const double bps = tiers_[t]->reference_bps;
  return bps > 0 ? config_.block_size / bps * 1e9 : slots_[t].read_ns;
}

int64_t StepReader::Deadline(int t) const {
  const double floor = config_.read_deadline_floor_seconds * 1e9, cap = config_.read_deadline_cap_seconds * 1e9;
  const double usual = slots_[t].read_ns;
  return static_cast<int64_t>(usual == 0 ? cap : std::clamp(kDeadlineFactor * usual, floor, cap));
}

int64_t StepReader::HedgeAfter(int t, const ReadSlot& slot) const {
  const auto* step = static_cast<const ReadStep*>(slot.ref.step);
  const uint32_t others = step->chunks[step->blocks[slot.ref.block].chunk].holders & ~(1u << t);
  double fastest = -1;  // ns the fastest other holder that can read needs for a block
  for (size_t h = 0; h < tiers_.size(); ++h) {
    if (!(others & (1u << h)) || slots_[h].late > 0 || !tiers_[h]->readable) continue;
    const double block_ns = BlockNs(static_cast<int>(h));
    if (fastest < 0 || block_ns < fastest) fastest = block_ns;
  }
  return std::max(Deadline(t), static_cast<int64_t>(std::max(0.0, fastest)));
}

void StepReader::MaybeHedge(int t, ReadSlot* slot, int64_t now) {
  auto* step = static_cast<ReadStep*>(slot->ref.step);
  if (step->blocks[slot->ref.block].state != BlockState::kInFlight) {
    slot->hedge_pending = false;
    return;
  }
  if (now - slot->issued_ns < HedgeAfter(t, *slot)) {
    slot->hedge_pending = true;  // another holder would take longer than the late read might
    return;
  }
  slot->hedge_pending = false;
  if (Hedge(t, slot)) return;
  const bool give_up = config_.read_give_up_seconds > 0;
  slot->give_up_pending = give_up;
  if (slots_[t].late == 1) {
    spdlog::warn("tier {}: the late read of '{}' cannot be taken over (no other holder, or it reads straight into "
                 "memory the store cannot take back); {}",
                 tiers_[t]->name, step->reads[step->blocks[slot->ref.block].chunk].key,
                 give_up ? absl::StrCat("its chunk fails if it has not landed ", config_.read_give_up_seconds,
                                        " s after it was issued (reads.give_up)")
                         : std::string("its step waits for it"));
  }
}

void StepReader::GiveUp(int t, ReadSlot* slot) {
  slot->give_up_pending = false;
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
  const bool safe = slot->buffer != slot->dst ||
                    regions_->TakeBack(t, slot->region, static_cast<uint8_t*>(slot->buffer), slot->length);
  if (!safe) {
    spdlog::warn("tier {}: the late read of '{}' cannot be given up (it reads straight into memory the store cannot "
                 "take back); its step waits for it",
                 tier.name, step->reads[chunk].key);
    return;
  }
  tier.device->Abandon(slot);
  pool_->Abandon(slot->ref, t);
  ++tier.counters.given_up_reads;
  step->state[chunk].real_failure = true;
  step->state[chunk].error = GivenUpWhy(t);
  uint64_t left_out;
  if (tier.read_log.Allow(&left_out)) {
    spdlog::warn("tier {}: gave up the read of '{}' after {} s (no other tier holds it); the chunk fails{}", tier.name,
                 step->reads[chunk].key, config_.read_give_up_seconds,
                 left_out ? absl::StrCat(" (", left_out, " more read failures not logged)") : "");
  }
  Settle(step, chunk);
}

std::string StepReader::GivenUpWhy(int t) const {
  return absl::StrCat("tier ", tiers_[t]->name, " has not answered a read in ", config_.read_give_up_seconds,
                      " s and no other tier holds the chunk");
}

uint32_t StepReader::GivenUpTiers() const {
  uint32_t mask = 0;
  for (size_t t = 0; t < slots_.size(); ++t) {
    if (slots_[t].given_up) mask |= 1u << t;
  }
  return mask;
}

void StepReader::DropGivenUpTiers(Step* only) {
  std::vector<std::pair<Step*, uint32_t>> failing;
  for (size_t t = 0; t < slots_.size(); ++t) {
    if (!slots_[t].given_up) continue;
    const size_t first = failing.size();
    pool_->DropTier(static_cast<int>(t), only, &failing);
    for (size_t i = first; i < failing.size(); ++i) {
      auto* step = static_cast<ReadStep*>(failing[i].first);
      const uint32_t chunk = failing[i].second;
      if (step->state[chunk].error.empty()) {
        step->state[chunk].error = GivenUpWhy(static_cast<int>(t));
      }
      step->state[chunk].real_failure = true;
    }
  }
  // Settled once all are marked: settling the last failing chunk of a step finishes (frees) it.
  for (auto [s, chunk] : failing) Settle(static_cast<ReadStep*>(s), chunk);
}

int64_t StepReader::CheckDeadlines() {
  const int64_t now = reactor_->NowNs();
  const int64_t give_up_ns = static_cast<int64_t>(config_.read_give_up_seconds * 1e9);
  int64_t next = kNoDeadline;
  bool newly_given_up = false;
  for (size_t t = 0; t < slots_.size(); ++t) {
    // A tier stalled for give_up is given up even when its late reads were all taken over:
    // chunks only it holds would otherwise wait for it without bound.
    TierReads& tr = slots_[t];
    if (give_up_ns > 0 && tr.late > 0 && !tr.given_up) {
      if (now >= tr.stalled_since_ns + give_up_ns) {
        tr.given_up = newly_given_up = true;
      } else {
        next = std::min(next, tr.stalled_since_ns + give_up_ns);
      }
    }
    const int64_t deadline = Deadline(static_cast<int>(t));
    for (ReadSlot& slot : slots_[t].slots) {
      if (slot.busy && slot.late && slot.give_up_pending) {
        const int64_t at = slot.issued_ns + give_up_ns;
        if (now >= at) {
          GiveUp(static_cast<int>(t), &slot);
          if (!slots_[t].given_up) slots_[t].given_up = newly_given_up = true;
        } else {
          next = std::min(next, at);
        }
        continue;
      }
      if (slot.busy && slot.late && slot.hedge_pending) {
        MaybeHedge(static_cast<int>(t), &slot, now);
        if (slot.hedge_pending) next = std::min(next, slot.issued_ns + HedgeAfter(static_cast<int>(t), slot));
        continue;
      }
      if (!slot.busy || slot.late) continue;
      if (now - slot.issued_ns >= deadline) {
        ReadLate(static_cast<int>(t), &slot, now);
      } else {
        next = std::min(next, slot.issued_ns + deadline);
      }
    }
  }
  if (newly_given_up) DropGivenUpTiers(nullptr);  // after the loop: it may finish steps
  return next;
}

void StepReader::ReadLate(int t, ReadSlot* slot, int64_t now) {
  TierReads& tr = slots_[t];
  Tier& tier = *tiers_[t];
  slot->late = true;
  if (tr.late++ == 0) {
    tr.stalled_since_ns = now;
    tier.stalled = true;
    ++tier.counters.stalls;
    pool_->ReleasePins(t);  // static or fastest routing must not leave blocks waiting for it
    spdlog::warn("tier {}: a read has been in flight for {} ms (deadline {} ms): stalled, it claims no new reads "
                 "until it answers",
                 tier.name, (now - slot->issued_ns) / 1'000'000, Deadline(t) / 1'000'000);
  }
  ++tier.counters.late_reads;
  MaybeHedge(t, slot, now);
}

void StepReader::ReadLanded(int t, ReadSlot* slot, int64_t now) {
  TierReads& tr = slots_[t];
  const double took = static_cast<double>(now - slot->issued_ns);
  tr.read_ns = tr.read_ns == 0 ? took : (1 - kReadTimeWeight) * tr.read_ns + kReadTimeWeight * took;
  tiers_[t]->counters.read_seconds.Observe(took / 1e9);
  slot->busy = false;
  slot->hedge_pending = false;
  slot->give_up_pending = false;
  if (!slot->late) return;
  slot->late = false;
  if (--tr.late == 0) {
    tr.given_up = false;
    tiers_[t]->stalled = false;
    spdlog::info("tier {}: answers again after {} ms", tiers_[t]->name, (now - tr.stalled_since_ns) / 1'000'000);
  }
}

bool StepReader::Hedge(int t, ReadSlot* slot) {
  auto* step = static_cast<ReadStep*>(slot->ref.step);
  const StepChunk& chunk = step->chunks[step->blocks[slot->ref.block].chunk];
  if ((chunk.holders & ~(1u << t)) == 0) return false;
  // The abandoned read must not be seen: it lands in the slot's bounce buffer (busy until then),
  // or in registered memory the store takes back from it.
  const bool safe = slot->buffer != slot->dst ||
                    regions_->TakeBack(t, slot->region, static_cast<uint8_t*>(slot->buffer), slot->length);
  if (!safe) return false;
  tiers_[t]->device->Abandon(slot);
  pool_->Reissue(slot->ref, t);
  ++tiers_[t]->counters.hedged_reads;
  tiers_[t]->counters.hedged_bytes += slot->payload;
  return true;
}

bool StepReader::HedgeTail(int h, int64_t* recheck) {
  const double block_ns = BlockNs(h);
  if (block_ns == 0) return false;  // no measure of this tier yet
  const double margin = std::max(kTailFactor * block_ns, kTailFloorNs);
  const int64_t now = reactor_->NowNs();
  int best_tier = -1;
  ReadSlot* best = nullptr;
  for (size_t t = 0; t < slots_.size(); ++t) {
    if (static_cast<int>(t) == h) continue;
    const double usual = slots_[t].read_ns;
    for (ReadSlot& slot : slots_[t].slots) {
      if (!slot.busy || slot.late) continue;
      auto* step = static_cast<ReadStep*>(slot.ref.step);
      // Only completion routing spreads a step over every tier: the fixed splits and the
      // single-tier policies are references, read as they say.
      if (step->policies.routing.kind != RoutingKind::kCompletion) continue;
      const StepBlock& blk = step->blocks[slot.ref.block];
      if (blk.state != BlockState::kInFlight || !(step->chunks[blk.chunk].holders & (1u << h))) continue;
      // It lands much later than `h` could read it (by its tier's usual read time), or it is
      // overdue there: in flight twice its tier's usual time, and much longer than `h` needs.
      const double age = static_cast<double>(now - slot.issued_ns);
      const double overdue = std::max(2 * usual, margin);
      const bool straggles = usual > 0 && (usual - age > margin || age > overdue);
      if (!straggles) {
        // Nothing lands from that tier meanwhile, perhaps: look again when it is overdue.
        if (usual > 0) *recheck = std::min(*recheck, slot.issued_ns + static_cast<int64_t>(overdue) + 1);
        continue;
      }
      if (best == nullptr || slot.issued_ns < best->issued_ns) {
        best_tier = static_cast<int>(t);
        best = &slot;
      }
    }
  }
  if (best == nullptr || !Hedge(best_tier, best)) return false;
  spdlog::debug("tier {}: takes over a straggler of tier {} in flight for {} ms", tiers_[h]->name,
                tiers_[best_tier]->name, (now - best->issued_ns) / 1'000'000);
  return true;
}

bool StepReader::LeavesToOthers(int t, BlockRef ref) const {
  const auto* step = static_cast<const ReadStep*>(ref.step);
  if (step->policies.routing.kind != RoutingKind::kCompletion) return false;
  // A tier with nothing in flight always reads: its read time stays measured (a time inflated by
  // a hang or a slow spell comes down again as its reads land), and a step never waits on an
  // estimate alone.
  if (slots_[t].free.size() == slots_[t].slots.size()) return false;
  const double own_ns = slots_[t].read_ns;  // when a read of `t` issued now would land
  const uint32_t others = step->chunks[step->blocks[ref.block].chunk].holders & ~(1u << t);
  if (own_ns == 0 || others == 0) return false;
  double blocks_per_ns = 0;  // of the other holders together
  size_t in_flight = 0;
  for (size_t h = 0; h < tiers_.size(); ++h) {
    if (!(others & (1u << h)) || slots_[h].late > 0 || !tiers_[h]->readable) continue;
    const double bps = tiers_[h]->reference_bps;
    if (bps <= 0) return false;  // not measured yet
    blocks_per_ns += bps / 1e9 / config_.block_size;
    in_flight += slots_[h].slots.size() - slots_[h].free.size();
  }
  if (blocks_per_ns == 0) return false;
  // They read what they have in flight, every block still unclaimed and this one before it would land.
  const double others_done_ns = static_cast<double>(in_flight + pool_->unclaimed() + 1) / blocks_per_ns;
  return others_done_ns <= own_ns;
}

}  // namespace kvstream
