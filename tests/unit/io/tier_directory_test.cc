// A tier's directory as the Store opens it: locked against a second store, its lock file never
// a link or a FIFO, an unwritable path a clear error, and tmpfs (no O_DIRECT before Linux 6.6)
// falling back to buffered I/O.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "store_test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("a tier directory is locked against a second store") {
  TempDir dir;
  auto first = OpenStoreOrSkip(TwoTiers(dir));
  auto second = Store::Open(TwoTiers(dir));
  REQUIRE_FALSE(second.ok());
  CHECK(absl::IsFailedPrecondition(second.status()));
  CHECK(std::string(second.status().message()).find("in use") != std::string::npos);
}

TEST_CASE("a symlink or a FIFO under a tier's lock name is refused at open, a link's target untouched") {
  TempDir dir;
  fs::create_directories(dir.sub("t0"));
  const std::string lock = dir.sub("t0/.kvstream.lock"), target = dir.sub("target");
  std::ofstream(target) << "precious";
  fs::create_symlink(target, lock);
  auto linked = Store::Open(TwoTiers(dir));
  REQUIRE_FALSE(linked.ok());
  CHECK(std::string(linked.status().message()).find("symbolic link") != std::string::npos);
  std::ifstream in(target);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "precious");
  fs::remove(lock);
  REQUIRE(mkfifo(lock.c_str(), 0600) == 0);
  auto fifo = Store::Open(TwoTiers(dir));  // never blocks on it
  REQUIRE_FALSE(fifo.ok());
  CHECK(std::string(fifo.status().message()).find("not a regular file") != std::string::npos);
}

TEST_CASE("an unwritable tier path is a clear error") {
  TempDir dir;
  std::ofstream(dir.sub("file")) << "x";
  StoreConfig c;
  c.tiers.push_back({"t", dir.sub("file") + "/sub", 1 << 30});
  auto store = Store::Open(c);
  REQUIRE_FALSE(store.ok());
  CHECK(std::string(store.status().message()).find("tier 't'") != std::string::npos);
}

TEST_CASE("tmpfs tiers fall back to buffered I/O and say so") {
  if (!fs::is_directory("/dev/shm")) {
    std::cerr << "SKIPPED: no /dev/shm\n";
    std::exit(kSkipExitCode);
  }
  TempDir dir("/dev/shm");
  StoreConfig c;
  c.tiers.push_back({"mem", dir.sub("t"), 1 << 30});
  auto store = OpenStoreOrSkip(c);
  auto data = Payload(300000, 3);
  REQUIRE(store->Persist("m", data.data(), data.size()).ok());
  store->Flush();
  std::vector<uint8_t> out(data.size());
  std::vector<ChunkResult> results;
  store->Retrieve({{"m", out.data(), out.size()}}, &results);
  REQUIRE(results[0].status.ok());
  CHECK((out == data));
  // Kernels before 6.6 have no O_DIRECT on tmpfs; either way the stats tell which I/O is used.
  const TierStats t = store->Stats().tiers[0];
  INFO("direct_io=" << t.direct_io);
  CHECK((t.direct_io ? t.mem_alignment >= 4096 : t.mem_alignment == 1));
}

}  // namespace
}  // namespace kvstream::testing
