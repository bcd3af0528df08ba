// kvtorture crash: kill -9 cycles under load. Writers persist new versions of their own keys and
// keep a ledger of every version acknowledged written (a kill -9 loses nothing the kernel holds);
// readers check every chunk they get is an intact version. The daemon is killed with SIGKILL at a random moment, restarted, and every key
// of the ledger must read back as its last acknowledged version or a newer attempted one: an
// acknowledged chunk lost, or any bad byte served, fails the run.
//
// Power cuts (tests/torture/power_cut_test.sh): with a cut command, each kill is followed by a
// power cut of the tiers' file system (kvfaultfs --power-cut) before the restart. With
// fsync: chunk every acknowledged version must survive it; with fsync: none (`synced_floor`) only
// the versions acknowledged before the last sync point (the sync command, run every
// sync_seconds) must, and the ones acknowledged since and not served are counted as rolled back.
#pragma once

#include <cstdint>
#include <string>

namespace kvtorture {

struct CrashOptions {
  std::string daemon;   // kvstreamd binary
  std::string config;   // its YAML
  std::string socket;   // the control socket the YAML names
  std::string log = "/dev/null";
  int cycles = 5;
  int keys = 64;
  int writers = 2;
  int readers = 1;
  double min_seconds = 0.3;  // load before the kill, drawn uniformly
  double max_seconds = 1.5;
  uint64_t seed = 1;
  // Power cuts: shell commands run after the kill (the daemon reaped), each with KVTORTURE_SEED in
  // its environment; "" for none.
  std::string cut_command;       // the power cut
  std::string power_on_command;  // the power back, before the restart
  std::string sync_command;      // a sync point during the load (sync(2))
  double sync_seconds = 0.2;     // between sync points
  bool synced_floor = false;     // fsync: none: a cut may take back what was acked since the last sync
};

// Returns the process exit code: 0 when nothing acknowledged was lost and nothing bad was served.
int RunCrash(const CrashOptions& options);

}  // namespace kvtorture
