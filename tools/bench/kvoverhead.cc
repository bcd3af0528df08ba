// kvoverhead: the control-plane cost of a step through kvstreamd, measured against the core alone
// on the same tier directories, side by side in one run. Use fast tiers (e.g. under /dev/shm) so
// that I/O does not hide the overhead.
// Usage: kvoverhead --kvstreamd PATH --dir DIR [--steps N] [--chunks C] [--chunk-size S]
#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvstream/client.h"
#include "kvstream/store.h"
#include "spdlog/spdlog.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvoverhead: per-step time through kvstreamd versus the storage core alone, same tiers, same steps"};
  std::string daemon_path, dir, size_text = "256KiB";
  int steps = 200, chunks = 16;
  app.add_option("--kvstreamd", daemon_path, "the kvstreamd binary")->required()->check(CLI::ExistingFile);
  app.add_option("--dir", dir, "working directory for two tiers and the socket (fast storage, e.g. /dev/shm/x)")->required();
  app.add_option("--steps", steps, "steps measured on each side")->capture_default_str();
  app.add_option("--chunks", chunks, "chunks per step")->capture_default_str();
  app.add_option("--chunk-size", size_text, "bytes per chunk")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const uint64_t size = *kvstream::ParseBytes(size_text);
  const uint64_t slot = (size + 4095) / 4096 * 4096;

  kvstream::StoreConfig config;
  config.block_size = 256 << 10;
  config.tiers.push_back({"t0", dir + "/t0", 1ull << 30});
  config.tiers.push_back({"t1", dir + "/t1", 1ull << 30});
  std::vector<double> core_s, daemon_s;
  std::vector<uint8_t> data(size, 0x5a);
  {  // The core alone: populate, then time the steps.
    auto store = kvstream::Store::Open(config);
    if (!store.ok()) {
      std::fprintf(stderr, "kvoverhead: %s\n", store.status().ToString().c_str());
      return 1;
    }
    for (int i = 0; i < chunks; ++i) (void)(*store)->Persist("o/" + std::to_string(i), data.data(), size);
    (*store)->Flush();
    std::unique_ptr<uint8_t, decltype(&std::free)> dst(static_cast<uint8_t*>(std::aligned_alloc(4096, slot * chunks)), &std::free);
    for (int s = 0; s < steps; ++s) {
      std::vector<kvstream::ChunkRead> reads;
      for (int i = 0; i < chunks; ++i) reads.push_back({"o/" + std::to_string(i), dst.get() + i * slot, slot});
      const auto t0 = std::chrono::steady_clock::now();
      (*store)->Retrieve(reads);
      core_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  // The same tiers behind kvstreamd.
  const std::string sock = dir + "/kvstreamd.sock", conf = dir + "/kvstreamd.yaml";
  std::ofstream(conf) << "socket: {path: " << sock << "}\nblock_size: 256KiB\nlogging: {level: warn}\ntiers:\n"
                      << "  - {name: t0, path: " << dir << "/t0, capacity: 1GiB}\n"
                      << "  - {name: t1, path: " << dir << "/t1, capacity: 1GiB}\n";
  const pid_t pid = fork();
  if (pid == 0) {
    execl(daemon_path.c_str(), "kvstreamd", "--config", conf.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  absl::StatusOr<std::unique_ptr<kvstream::Client>> client = absl::UnavailableError("not started");
  for (int i = 0; i < 200 && !client.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (access(sock.c_str(), F_OK) == 0) client = kvstream::Client::Attach(sock, {"kvoverhead", 0, 1, slot * chunks});
  }
  if (!client.ok()) {
    std::fprintf(stderr, "kvoverhead: %s\n", client.status().ToString().c_str());
    kill(pid, SIGTERM);
    return 1;
  }
  std::vector<kvstream::ChunkRange> get;
  for (int i = 0; i < chunks; ++i) get.push_back({"o/" + std::to_string(i), i * slot, slot});
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    auto rec = (*client)->Retrieve(get);
    daemon_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!rec.ok() || rec->hits != static_cast<uint32_t>(chunks)) {
      std::fprintf(stderr, "kvoverhead: daemon step failed\n");
      break;
    }
  }
  client->reset();
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  const double core = Median(core_s), through = Median(daemon_s);
  std::printf("%d steps of %d x %s on %s, median per step:\n", steps, chunks, size_text.c_str(), dir.c_str());
  std::printf("  core alone      %9.1f us\n", core * 1e6);
  std::printf("  via kvstreamd   %9.1f us\n", through * 1e6);
  std::printf("  control plane   %9.1f us per step (%+.1f%%), %.1f us per chunk\n", (through - core) * 1e6,
              100 * (through / core - 1), (through - core) * 1e6 / chunks);
  return 0;
}
