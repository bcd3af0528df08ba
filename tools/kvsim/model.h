// The performance model of docs/design.md sections 1-2: retrieval time of a step under each policy,
// given per-tier bandwidths and the time each tier is still busy with earlier writes.
#pragma once

#include <cstdint>
#include <vector>

namespace kvsim {

// Aggregate-bandwidth bound: the earliest T with sum_k b_k * max(0, T - delay_k) = D.
// With no delays this is D / sum_k b_k. The daemon's (model/load_model.h), on vectors.
double BoundTime(double bytes, const std::vector<double>& bandwidth, const std::vector<double>& delay = {});

// Static split: share g of the step's bytes on tier 0, the rest on tier 1.
double StaticTime(double bytes, double g, double b0, double b1, double delay0 = 0, double delay1 = 0);

// Penalty of a static split over the bound: max(g/phi, (1-g)/(1-phi)) - 1, phi = b0/(b0+b1).
double StaticPenalty(double g, double b0, double b1);

// Completion-driven routing at block granularity: every tier keeps `depth` blocks in flight and
// claims the next unread block whenever one completes; a tier serves its blocks one after another
// at its bandwidth (so the tail is what is in flight when the pool runs dry). With `leave_tail`
// (the daemon's StepReader::LeavesToOthers) a tier that still has a block in flight does not claim
// the next one when the other tiers would read all they hold and every unclaimed block, that one
// included, before it would land. Fills bytes per tier.
double CompletionTime(double bytes, double block, uint32_t depth, const std::vector<double>& bandwidth,
                      const std::vector<double>& delay = {}, std::vector<double>* tier_bytes = nullptr,
                      bool leave_tail = true);

// Completion routing over tiers that each hold only some of the step's blocks (a tier over several
// drives: each drive holds its own chunks): bit k of `holders[i]` is set when tier k holds block i
// (at least one does). As in the daemon, the last tier claims from the back of the step and the
// others from the front, each the next unclaimed block it holds whenever it has fewer than `depth`
// in flight, and a tier reads its claims one after another at its bandwidth. Every block is
// `block` bytes. Returns the step's time; fills bytes per tier.
double PlacedCompletionTime(double block, uint32_t depth, const std::vector<double>& bandwidth,
                            const std::vector<uint32_t>& holders, std::vector<double>* tier_bytes = nullptr);

// One tier only, all bytes at its bandwidth.
inline double FastestTime(double bytes, double b0, double delay0 = 0) { return delay0 + bytes / b0; }

// Serial per request: chunk after chunk from one tier, each read paying `latency` before it.
inline double SerialTime(double bytes, uint64_t chunks, double latency, double b0, double delay0 = 0) {
  return delay0 + chunks * latency + bytes / b0;
}

}  // namespace kvsim
