// The per-tier counters: the one place a counter of a tier is declared. Each counts up from the
// daemon's start. A line X(field, metric, labels, help) gives it
//   - an atomic in the engine's TierCounters (src/io/tier.h) and a number in TierStats (types.h),
//   - its entry in kvstream.proto's TierStats.counters (carried by `field` as the map key),
//   - its samples in /metrics: `metric`{tier="...",labels}, a counter with `help` (lines that
//     share a metric name are one family, told apart by their labels),
//   - its place in `kvstreamctl stats --json` and in the Python client's TierStats.
// Adding a counter is a line here and the code that counts it.
#pragma once

#define KVSTREAM_TIER_COUNTERS(X)                                                                                  \
  X(bytes_read, "kvstream_tier_read_bytes_total", "", "Payload bytes read per tier.")                              \
  X(blocks_read, "kvstream_tier_read_blocks_total", "", "Blocks read per tier.")                                   \
  X(bytes_written, "kvstream_tier_written_bytes_total", "", "Replica bytes written per tier.")                     \
  X(replicas_written, "kvstream_tier_replicas_written_total", "", "Replicas written per tier.")                     \
  X(read_errors, "kvstream_tier_errors_total", "op=\"read\"", "Failed reads and writes per tier.")                 \
  X(write_errors, "kvstream_tier_errors_total", "op=\"write\"", "Failed reads and writes per tier.")               \
  X(no_space_errors, "kvstream_tier_errors_by_kind_total", "kind=\"no_space\"",                                    \
    "Failed operations per tier by kind: no_space (ENOSPC, EDQUOT), gone (ENOENT, ESTALE), media (bad bytes).")    \
  X(gone_errors, "kvstream_tier_errors_by_kind_total", "kind=\"gone\"",                                            \
    "Failed operations per tier by kind: no_space (ENOSPC, EDQUOT), gone (ENOENT, ESTALE), media (bad bytes).")    \
  X(media_errors, "kvstream_tier_errors_by_kind_total", "kind=\"media\"",                                          \
    "Failed operations per tier by kind: no_space (ENOSPC, EDQUOT), gone (ENOENT, ESTALE), media (bad bytes).")    \
  X(checksum_failures, "kvstream_tier_checksum_failures_total", "", "Blocks that failed their checksum per tier.") \
  X(dropped_replicas, "kvstream_tier_dropped_replicas_total", "", "Replicas dropped because bad or gone.")         \
  X(secondaries_dropped, "kvstream_tier_secondaries_dropped_total", "",                                            \
    "Copies for the tier given up under staging pressure (replication: adaptive).")                                \
  X(evictions, "kvstream_tier_evictions_total", "", "Replicas evicted per tier (LRU or by request).")              \
  X(bounce_reads, "kvstream_tier_bounce_reads_total", "",                                                          \
    "Blocks read through a bounce buffer (a destination not aligned for O_DIRECT, or device memory).")             \
  X(stalls, "kvstream_tier_stalls_total", "", "Times the tier was marked stalled (a read past its deadline).")     \
  X(late_reads, "kvstream_tier_late_reads_total", "", "Reads that missed their deadline.")                         \
  X(hedged_reads, "kvstream_tier_hedged_reads_total", "", "Reads abandoned and served by another tier.")           \
  X(hedged_bytes, "kvstream_tier_hedged_bytes_total", "",                                                        \
    "Payload bytes of the reads abandoned and served by another tier.")                                            \
  X(given_up_reads, "kvstream_tier_given_up_reads_total", "",                                                     \
    "Late reads no other tier could take over, given up after reads.give_up (their chunks failed).")               \
  X(tail_blocks_left, "kvstream_tier_tail_blocks_left_total", "",                                                  \
    "Blocks the tier left to faster tiers at the end of a step (they would read them all sooner).")
