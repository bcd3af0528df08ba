// A client that attaches to kvstreamd, starts a retrieve of the given keys (each 4 MiB) and dies
// with it in flight. Used by daemon_test to check that the daemon cleans up after a crashed client.
// Usage: victim_client SOCKET KEY...
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kvstream/client.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  auto c = kvstream::Client::Attach(argv[1], {"victim", 0, 1, 64 << 20});
  if (!c.ok()) return 1;
  std::vector<kvstream::ChunkRange> chunks;
  for (int i = 2; i < argc; ++i) chunks.push_back({argv[i], static_cast<uint64_t>(i - 2) << 22, 4 << 20});
  std::thread([&] { (void)(*c)->Retrieve(chunks); }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  _exit(0);  // no detach, no cleanup: as if the process crashed
}
