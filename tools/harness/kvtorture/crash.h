// kvtorture crash: kill -9 cycles under load. Writers persist new versions of their own keys and
// keep a ledger of every version acknowledged written (a kill -9 loses nothing the kernel holds);
// readers check every chunk they get is an intact version. The daemon is killed with SIGKILL at a random moment, restarted, and every key
// of the ledger must read back as its last acknowledged version or a newer attempted one: an
// acknowledged chunk lost, or any bad byte served, fails the run.
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
};

// Returns the process exit code: 0 when nothing acknowledged was lost and nothing bad was served.
int RunCrash(const CrashOptions& options);

}  // namespace kvtorture
