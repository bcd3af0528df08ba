#include "restart.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "daemon_runner.h"
#include "format/chunk_format.h"

namespace kvtorture {
namespace {

bool DropCaches() {
  sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  return static_cast<bool>(f);
}

}  // namespace

int RunFill(const FillOptions& o) {
  for (const std::string& dir : o.dirs) {
    std::atomic<uint64_t> next{0}, failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&] {
        std::vector<uint8_t> payload(o.chunk_bytes), image;
        for (uint64_t i = next++; i < o.chunks; i = next++) {
          const std::string key = "fill/" + std::to_string(i);
          for (size_t b = 0; b < payload.size(); ++b) payload[b] = static_cast<uint8_t>(i + b);
          const kvstream::ChunkMeta meta =
              kvstream::DescribeChunk(key, payload.data(), payload.size(), 1 << 20, 1700000000000000000 + i);
          image.resize(meta.file_size());
          kvstream::EncodeChunkFile(meta, payload.data(), image.data());
          const std::string stem = kvstream::FileStem(key);
          mkdir((dir + "/" + stem.substr(0, 2)).c_str(), 0750);
          const std::string path = dir + "/" + kvstream::RelativeChunkPath(stem);
          const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
          if (fd < 0 || write(fd, image.data(), image.size()) != static_cast<ssize_t>(image.size())) ++failed;
          if (fd >= 0) close(fd);
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failed > 0) {
      std::fprintf(stderr, "kvtorture: %llu chunk files could not be written in %s\n",
                   static_cast<unsigned long long>(failed.load()), dir.c_str());
      return 1;
    }
    std::printf("fill: %llu chunk files of %llu bytes in %s\n", static_cast<unsigned long long>(o.chunks),
                static_cast<unsigned long long>(o.chunk_bytes), dir.c_str());
  }
  return 0;
}

int RunRestart(const RestartOptions& o) {
  DaemonRunner daemon(o.daemon, o.config, o.socket);
  double seconds[2];
  for (int run = 0; run < 2; ++run) {
    if (o.drop_caches && !DropCaches()) std::fprintf(stderr, "kvtorture: cannot drop the page cache (not root?)\n");
    seconds[run] = daemon.Start(o.log);
    if (seconds[run] < 0) {
      std::fprintf(stderr, "kvtorture: kvstreamd did not start; see %s\n", o.log.c_str());
      return 1;
    }
    if (!daemon.Stop()) {
      std::fprintf(stderr, "kvtorture: kvstreamd did not stop cleanly\n");
      return 1;
    }
  }
  std::printf("restart: start to serving %.2f s reading every chunk header, %.2f s from the index saved at a clean "
              "shutdown%s\n",
              seconds[0], seconds[1], o.drop_caches ? " (page cache dropped before each)" : "");
  return 0;
}

}  // namespace kvtorture
