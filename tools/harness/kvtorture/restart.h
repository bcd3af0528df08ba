// kvtorture fill / restart: how long kvstreamd takes from start to serving with many chunk files.
// fill writes valid chunk files straight into tier directories (as a daemon would have left them);
// restart starts the daemon on them (every header read: no saved index), stops it cleanly, and
// starts it again (the saved index), timing both with the page cache dropped first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvtorture {

struct FillOptions {
  std::vector<std::string> dirs;  // tier directories
  uint64_t chunks = 100000;       // per directory
  uint64_t chunk_bytes = 4096;
  int threads = 8;
};

struct RestartOptions {
  std::string daemon, config, socket, log = "/dev/null";
  bool drop_caches = true;  // echo 3 > /proc/sys/vm/drop_caches before each start (root)
};

int RunFill(const FillOptions& options);
int RunRestart(const RestartOptions& options);

}  // namespace kvtorture
