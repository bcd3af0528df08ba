// Client regions end to end: a real kvstreamd reads into and persists from shared memory the
// client owns (a /dev/shm file or a memfd), and survives the client truncating it mid-request or
// punching a hole in a hugetlbfs region that no free huge page can fill.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_process.h"
#include "kvstream/client.h"
#include "shared_memory.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr size_t kChunk = 1 << 20;

// Every chunk's replica count and the tiers' error counters: what a client's truncation must
// never change.
struct Health {
  uint32_t masks = 0;  // OR of the tier masks of every key
  uint64_t read_errors = 0, checksum_failures = 0, dropped = 0;
};

Health Check(Client& c, const std::vector<std::string>& keys) {
  Health h{0xffffffffu};
  auto look = c.Lookup(keys);
  REQUIRE(look.ok());
  for (const LookupEntry& r : *look) h.masks &= r.tier_mask;
  auto stats = c.Stats();
  REQUIRE(stats.ok());
  for (const TierStats& t : stats->tiers) {
    h.read_errors += t.read_errors;
    h.checksum_failures += t.checksum_failures;
    h.dropped += t.dropped_replicas;
  }
  return h;
}

TEST_CASE("chunks are retrieved into and persisted from a client region, sealed or not") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  for (bool sealed : {false, true}) {
    INFO((sealed ? "sealed memfd" : "unsealed /dev/shm file"));
    MappedSharedMemory shm(16 * kChunk, sealed ? MappedSharedMemory::Kind::kSealedMemfd
                                                : MappedSharedMemory::Kind::kShmFile);
    auto region = c->AddRegion(shm.fd(), shm.size());
    REQUIRE(region.ok());
    CHECK(*region >= 1);
    const std::string prefix = sealed ? "sealed-" : "plain-";
    std::vector<std::vector<uint8_t>> data;
    std::vector<ChunkRange> put;
    for (int i = 0; i < 4; ++i) {
      data.push_back(Payload(kChunk - 1000 * i, 7 * i + sealed));
      std::memcpy(shm.data() + i * kChunk, data[i].data(), data[i].size());
      put.push_back({prefix + std::to_string(i), i * kChunk, data[i].size(), *region});
    }
    std::vector<PersistResult> pr;
    REQUIRE(c->Persist(put, &pr).ok());
    for (const PersistResult& r : pr) CHECK(r.tier_mask == 3u);
    // One step into both the region and the arena; bytes identical, nothing else touched.
    std::memset(shm.data() + 8 * kChunk, 0xEE, 8 * kChunk);
    std::vector<ChunkRange> get;
    for (int i = 0; i < 4; ++i) get.push_back({prefix + std::to_string(i), (8 + 2 * i) * kChunk, kChunk, *region});
    get.push_back({prefix + "0", 0, kChunk});  // the arena
    std::vector<ChunkResult> results;
    auto rec = c->Retrieve(get, &results);
    REQUIRE(rec.ok());
    for (int i = 0; i < 4; ++i) {
      REQUIRE(results[i].status.ok());
      CHECK(results[i].size == data[i].size());
      CHECK(std::memcmp(shm.data() + (8 + 2 * i) * kChunk, data[i].data(), data[i].size()) == 0);
      CHECK(shm.data()[(9 + 2 * i) * kChunk] == 0xEE);  // past the padded payload: untouched
    }
    REQUIRE(results[4].status.ok());
    CHECK(std::memcmp(c->arena(), data[0].data(), data[0].size()) == 0);
    // Requests naming a region that is not there, or a range outside it, are refused whole.
    CHECK(absl::IsOutOfRange(c->Retrieve({{prefix + "0", shm.size() - 4096, kChunk, *region}}).status()));
    CHECK(absl::IsNotFound(c->Retrieve({{prefix + "0", 0, kChunk, *region + 100}}).status()));
    REQUIRE(c->RemoveRegion(*region).ok());
    CHECK(absl::IsNotFound(c->Retrieve({{prefix + "0", 0, kChunk, *region}}).status()));
    CHECK(absl::IsNotFound(c->Persist({{prefix + "x", 0, kChunk, *region}})));
    CHECK(absl::IsNotFound(c->RemoveRegion(*region)));
  }
}

TEST_CASE("reads into a region a device pinned land through the daemon's bounce buffers, intact") {
  // A device-pinned region is never registered with the store (its pages must never be replaced
  // under a stalled read); reads land in bounce buffers and are copied in once verified.
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  auto bounced = [&] {
    auto stats = c->Stats();
    REQUIRE(stats.ok());
    uint64_t n = 0;
    for (const TierStats& t : stats->tiers) n += t.bounce_reads;
    return n;
  };
  for (bool sealed : {false, true}) {
    INFO((sealed ? "sealed memfd" : "unsealed /dev/shm file"));
    MappedSharedMemory plain_shm(8 * kChunk, sealed ? MappedSharedMemory::Kind::kSealedMemfd
                                                    : MappedSharedMemory::Kind::kShmFile);
    MappedSharedMemory pinned_shm(8 * kChunk, sealed ? MappedSharedMemory::Kind::kSealedMemfd
                                                     : MappedSharedMemory::Kind::kShmFile);
    auto plain = c->AddRegion(plain_shm.fd(), plain_shm.size());
    auto pinned = c->AddRegion(pinned_shm.fd(), pinned_shm.size(), /*device_pinned=*/true);
    REQUIRE(plain.ok());
    REQUIRE(pinned.ok());
    const std::string prefix = sealed ? "pin-sealed-" : "pin-plain-";
    std::vector<std::vector<uint8_t>> data;
    std::vector<ChunkRange> put;
    for (int i = 0; i < 4; ++i) {
      data.push_back(Payload(kChunk, 11 * i + sealed));
      std::memcpy(pinned_shm.data() + i * kChunk, data[i].data(), data[i].size());
      put.push_back({prefix + std::to_string(i), i * kChunk, data[i].size(), *pinned});
    }
    REQUIRE(c->Persist(put).ok());  // persists from a pinned region as from any other
    auto read_into = [&](uint32_t region, MappedSharedMemory& shm) {
      std::memset(shm.data() + 4 * kChunk, 0, 4 * kChunk);
      std::vector<ChunkRange> get;
      for (int i = 0; i < 4; ++i) get.push_back({prefix + std::to_string(i), (4 + i) * kChunk, kChunk, region});
      std::vector<ChunkResult> results;
      REQUIRE(c->Retrieve(get, &results).ok());
      for (int i = 0; i < 4; ++i) {
        REQUIRE(results[i].status.ok());
        CHECK(std::memcmp(shm.data() + (4 + i) * kChunk, data[i].data(), data[i].size()) == 0);
      }
    };
    // Aligned reads into a plain region go straight in by O_DIRECT once the daemon has registered
    // it (it faults a region in after adding it; until then reads into it bounce), except on the
    // thread engine, which KVSTREAM_IO_ENGINE may pick for the daemon and which bounces every block.
    const char* engine = std::getenv("KVSTREAM_IO_ENGINE");
    const bool threads = engine != nullptr && std::string(engine) == "threads";
    uint64_t before = bounced();
    read_into(*plain, plain_shm);
    for (int i = 0; i < 200 && !threads && bounced() != before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      before = bounced();
      read_into(*plain, plain_shm);
    }
    if (!threads) CHECK(bounced() == before);
    read_into(*pinned, pinned_shm);
    CHECK(bounced() >= before + 4);  // every block of the pinned reads went through a bounce buffer
    REQUIRE(c->RemoveRegion(*pinned).ok());
    REQUIRE(c->RemoveRegion(*plain).ok());
  }
}

TEST_CASE("unfit descriptors are refused as regions with clear errors") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  const std::string on_disk = dir.sub("plain-file");
  const int disk = open(on_disk.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(disk >= 0);
  REQUIRE(ftruncate(disk, 1 << 20) == 0);
  MappedSharedMemory shm(1 << 20, MappedSharedMemory::Kind::kShmFile);
  const std::string shm_path = "/proc/self/fd/" + std::to_string(shm.fd());
  const int read_only = open(shm_path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(read_only >= 0);
  struct Case {
    const char* what;
    int fd;
    uint64_t size;
  };
  for (const Case& k : {Case{"a file that is not shared memory", disk, 1 << 20},
                        Case{"a read-only descriptor", read_only, 1 << 20},
                        Case{"longer than the file", shm.fd(), 2 << 20}, Case{"empty", shm.fd(), 0}}) {
    INFO(k.what);
    auto region = c->AddRegion(k.fd, k.size);
    REQUIRE(!region.ok());
    CHECK(absl::IsInvalidArgument(region.status()));
    CHECK(!region.status().message().empty());
  }
  close(disk);
  close(read_only);
  auto fine = c->AddRegion(shm.fd(), shm.size());  // and the session still works
  CHECK(fine.ok());
}

TEST_CASE("a client truncating its region mid-retrieve and mid-persist fails only those chunks") {
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  constexpr int kChunks = 16;
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> data;
  std::vector<ChunkRange> put;
  for (int i = 0; i < kChunks; ++i) {
    keys.push_back("t" + std::to_string(i));
    data.push_back(Payload(kChunk, 300 + i));
    std::memcpy(c->arena() + i * kChunk, data[i].data(), kChunk);
    put.push_back({keys[i], i * kChunk, kChunk});
  }
  REQUIRE(c->Persist(put).ok());
  const Health before = Check(*c, keys);
  REQUIRE(before.masks == 3u);
  MappedSharedMemory shm(kChunks * kChunk, MappedSharedMemory::Kind::kShmFile);
  auto region = c->AddRegion(shm.fd(), shm.size());
  REQUIRE(region.ok());
  std::vector<ChunkRange> get, put_back;
  for (int i = 0; i < kChunks; ++i) {
    get.push_back({keys[i], i * kChunk, kChunk, *region});
    put_back.push_back({"back-" + keys[i], i * kChunk, kChunk, *region});
  }
  int failed = 0, succeeded = 0;
  for (int round = 0; round < 12; ++round) {
    // Truncate to nothing a little after the request starts, then grow back (fresh zero pages).
    std::atomic<bool> started{false};
    std::thread truncator([&] {
      while (!started) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds(300 * (round % 6)));
      REQUIRE(ftruncate(shm.fd(), 0) == 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      REQUIRE(ftruncate(shm.fd(), static_cast<off_t>(shm.size())) == 0);
    });
    std::vector<ChunkResult> results;
    std::vector<PersistResult> persisted;
    started = true;
    if (round % 2 == 0) {
      auto rec = c->Retrieve(get, &results);
      REQUIRE(rec.ok());
      for (const ChunkResult& r : results) {
        INFO(r.status.ToString());
        CHECK((r.status.ok() || absl::IsFailedPrecondition(r.status)));
        (r.status.ok() ? succeeded : failed)++;
      }
    } else {
      c->Persist(put_back, &persisted).IgnoreError();
      REQUIRE(persisted.size() == put_back.size());
      for (const PersistResult& r : persisted) {
        INFO(r.status.ToString());
        CHECK((r.status.ok() || absl::IsFailedPrecondition(r.status)));
      }
    }
    truncator.join();
  }
  INFO("chunks retrieved " << succeeded << ", failed " << failed);
  // The daemon is alive, blamed no tier (a block that hashed wrong in the region was judged again
  // in the daemon's own memory) and dropped no replica...
  const Health after = Check(*c, keys);
  CHECK(after.masks == 3u);
  CHECK(after.dropped == before.dropped);
  CHECK(after.read_errors == before.read_errors);
  CHECK(after.checksum_failures == before.checksum_failures);
  // ...and the region works again, byte for byte, now that the client leaves it alone.
  std::vector<ChunkResult> results;
  REQUIRE(c->Retrieve(get, &results).ok());
  for (int i = 0; i < kChunks; ++i) {
    REQUIRE(results[i].status.ok());
    CHECK(std::memcmp(shm.data() + i * kChunk, data[i].data(), kChunk) == 0);
  }
  std::memcpy(shm.data(), data[0].data(), kChunk);
  REQUIRE(c->Persist({{"after", 0, kChunk, *region}}).ok());
  std::memset(c->arena(), 0, kChunk);
  REQUIRE(c->Retrieve({{"after", 0, kChunk}}, &results).ok());
  CHECK(std::memcmp(c->arena(), data[0].data(), kChunk) == 0);
}

// The default-size huge pages of the node (/proc/meminfo): their size and how many are free.
struct HugePageCounts {
  uint64_t size = 0, total = 0, free = 0;
};
HugePageCounts ReadHugePages() {
  HugePageCounts counts;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {  // "Name:   value [kB]"
    std::istringstream fields(line);
    std::string name;
    uint64_t value = 0;
    fields >> name >> value;
    if (name == "Hugepagesize:") counts.size = value << 10;  // in kB
    if (name == "HugePages_Total:") counts.total = value;
    if (name == "HugePages_Free:") counts.free = value;
  }
  return counts;
}

// At least `wanted` free huge pages for the test's lifetime, the pool grown through
// /proc/sys/vm/nr_hugepages where needed (root) and put back as it was at scope exit; no
// surplus pages (nr_overcommit_hugepages 0), so a page taken is a page gone. `skip_reason` is
// set where the node cannot give them.
class HugePagePool {
 public:
  explicit HugePagePool(uint64_t wanted) {
    HugePageCounts now = ReadHugePages();
    if (now.size == 0) {
      skip_reason_ = "the kernel has no huge pages";
      return;
    }
    original_ = ReadKnob(kPool);
    overcommit_ = ReadKnob(kOvercommit);
    if (overcommit_ != 0) WriteKnob(kOvercommit, 0);
    if (now.free < wanted && !WriteKnob(kPool, now.total + wanted - now.free)) {
      skip_reason_ =
          "fewer than " + std::to_string(wanted) + " free huge pages, and cannot raise vm.nr_hugepages (needs root)";
      return;
    }
    if (ReadHugePages().free < wanted) {
      skip_reason_ = "the kernel could not allocate " + std::to_string(wanted) + " huge pages";
    }
  }
  ~HugePagePool() {
    if (original_ >= 0) WriteKnob(kPool, static_cast<uint64_t>(original_));
    if (overcommit_ > 0) WriteKnob(kOvercommit, static_cast<uint64_t>(overcommit_));
  }
  HugePagePool(const HugePagePool&) = delete;
  HugePagePool& operator=(const HugePagePool&) = delete;
  const std::string& skip_reason() const { return skip_reason_; }

 private:
  static constexpr char kPool[] = "/proc/sys/vm/nr_hugepages";
  static constexpr char kOvercommit[] = "/proc/sys/vm/nr_overcommit_hugepages";
  static int64_t ReadKnob(const char* path) {
    int64_t value = -1;
    std::ifstream(path) >> value;
    return value;
  }
  static bool WriteKnob(const char* path, uint64_t value) {
    std::ofstream out(path);
    out << value << std::endl;
    return static_cast<bool>(out);
  }
  int64_t original_ = -1, overcommit_ = -1;
  std::string skip_reason_;
};

// A memfd of `pages` huge pages, mapped and every page faulted in: what holds them.
struct HugeMemfd {
  HugeMemfd(uint64_t pages, uint64_t page_size, bool sealable) : size(pages * page_size) {
    fd = memfd_create("kvstream-test-huge", MFD_CLOEXEC | MFD_HUGETLB | (sealable ? MFD_ALLOW_SEALING : 0));
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) return;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p != MAP_FAILED) data = static_cast<uint8_t*>(p);
  }
  ~HugeMemfd() {
    if (data != nullptr) munmap(data, size);
    if (fd >= 0) close(fd);
  }
  HugeMemfd(const HugeMemfd&) = delete;
  HugeMemfd& operator=(const HugeMemfd&) = delete;
  uint64_t size;
  int fd = -1;
  uint8_t* data = nullptr;
};

TEST_CASE("a hole punched in a hugetlbfs region sealed against shrinking, no huge page free, leaves the daemon up") {
  // A hugetlbfs page punched out is replaced on the next touch only if a free huge page is left;
  // with none, a load or store through the daemon's mapping would be SIGBUS. Sealing against
  // shrinking does not stop hole punching, so such a region must be touched only under the guard.
  constexpr uint64_t kPages = 4;
  HugePagePool pool(kPages);
  if (!pool.skip_reason().empty()) {
    WARN("skipped: " << pool.skip_reason());
    std::exit(kSkipExitCode);
  }
  const uint64_t huge = ReadHugePages().size;
  TempDir dir;
  DaemonProcess d(dir);
  REQUIRE(d.Start());
  auto c = AttachOrFail(d);
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 2; ++i) {
    data.push_back(Payload(kChunk, 900 + i));
    std::memcpy(c->arena() + i * kChunk, data[i].data(), kChunk);
  }
  REQUIRE(c->Persist({{"huge-0", 0, kChunk}, {"huge-1", kChunk, kChunk}}).ok());

  HugeMemfd region_memory(kPages, huge, /*sealable=*/true);
  REQUIRE(region_memory.data != nullptr);
  REQUIRE(fcntl(region_memory.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  std::memcpy(region_memory.data, data[0].data(), kChunk);
  // Not whole huge pages: the daemon maps (and unmaps) the last one whole.
  auto region = c->AddRegion(region_memory.fd, region_memory.size - kChunk);
  REQUIRE(region.ok());
  // The client punches out its first huge page, and every free huge page is taken.
  REQUIRE(fallocate(region_memory.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(huge)) == 0);
  std::unique_ptr<HugeMemfd> filler;
  if (const uint64_t left = ReadHugePages().free; left > 0) {
    filler = std::make_unique<HugeMemfd>(left, huge, /*sealable=*/false);
    REQUIRE(filler->data != nullptr);
  }
  REQUIRE(ReadHugePages().free == 0);

  // A persist from the hole and a retrieve into it: each succeeds or fails its chunk alone.
  std::vector<PersistResult> persisted;
  c->Persist({{"from-hole", 0, kChunk, *region}}, &persisted).IgnoreError();
  REQUIRE(persisted.size() == 1);
  INFO("persist from the hole: " << persisted[0].status.ToString());
  CHECK((persisted[0].status.ok() || absl::IsFailedPrecondition(persisted[0].status)));
  std::vector<ChunkResult> results;
  auto into_hole = c->Retrieve({{"huge-0", 0, kChunk, *region}}, &results);
  INFO("retrieve into the hole: " << into_hole.status().ToString());
  REQUIRE(into_hole.ok());
  REQUIRE(results.size() == 1);
  INFO("the chunk retrieved into the hole: " << results[0].status.ToString());
  CHECK((results[0].status.ok() || absl::IsFailedPrecondition(results[0].status)));

  // The daemon is up and answers; the region's other pages work byte for byte.
  REQUIRE(c->Stats().ok());
  REQUIRE(c->Retrieve({{"huge-1", huge, kChunk, *region}}, &results).ok());
  REQUIRE(results[0].status.ok());
  CHECK(std::memcmp(region_memory.data + huge, data[1].data(), kChunk) == 0);
  REQUIRE(c->Persist({{"from-page-2", huge, kChunk, *region}}).ok());
  REQUIRE(c->Retrieve({{"from-page-2", 0, kChunk}}, &results).ok());
  REQUIRE(results[0].status.ok());
  CHECK(std::memcmp(c->arena(), data[1].data(), kChunk) == 0);
  // Removed, the region is no longer mapped in the daemon.
  REQUIRE(c->RemoveRegion(*region).ok());
  auto mapped = [&] {
    std::ifstream maps("/proc/" + std::to_string(d.pid()) + "/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("kvstream-test-huge") != std::string::npos) return true;
    }
    return false;
  };
  for (int i = 0; i < 500 && mapped(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK_FALSE(mapped());
  CHECK(d.Stop() == 0);
}

}  // namespace
}  // namespace kvstream::testing
