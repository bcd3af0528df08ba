// kvtorture stall / slow: a tier that stops answering, or turns very slow, in the middle of a
// running daemon's reads (the hook makes it so, e.g. `tierlab cap --dir D t1 0.008`).
//
// stall: persists `chunks` chunks on every tier, starts one step reading them all, runs the hook
// `hook_after_ms` into it, and reports how long the step took, whether its bytes are intact, how
// soon health named `expect_stalled` stalled, and how long a 4 KiB persist from another session
// took meanwhile. Fails when the step exceeds `step_limit_s`, a byte is wrong, health does not
// name the tier within `health_limit_s`, or the persist exceeds `persist_limit_s`.
//
// slow: measures each step with every block on the first tier (static:1: the first tier alone),
// then runs the hook and the same steps under completion routing; fails when a step takes more
// than `ratio_limit` x the first tier alone.
#pragma once

#include <cstdint>
#include <string>

namespace kvtorture {

struct StallOptions {
  std::string socket;
  int chunks = 16;
  uint64_t chunk_bytes = 4 << 20;
  std::string hook;  // shell command
  int hook_after_ms = 100;
  std::string undo;  // shell command that ends the misbehaviour, run if the step outlives its limit x 5
  std::string expect_stalled;
  double step_limit_s = 2.0;
  double health_limit_s = 5.0;
  double persist_limit_s = 2.0;
  // slow
  int steps = 5;
  double ratio_limit = 1.3;
};

int RunStall(const StallOptions& options);
int RunSlow(const StallOptions& options);

}  // namespace kvtorture
