// Shared tiers on real files: several stores ("nodes"), each with a private tier of its own, use
// one shared directory at once: they read each other's chunks, race to publish the same key,
// evict only their own files under their own quota, and never serve a torn or foreign file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "format/chunk_format.h"
#include "kvstream/store.h"
#include "store_open.h"
#include "test_util.h"
#include "xxh3_forgery.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

// Node `name`: a private tier "nvme" below `dir`/<name>, and the shared tier "pfs" at `shared`.
StoreConfig Node(const TempDir& dir, const std::string& name, const std::string& shared,
                 uint64_t pfs_quota = 1ull << 30, ReplicationPolicy replication = ReplicationPolicy::kAll) {
  StoreConfig c;
  c.node = name;
  c.block_size = 256 << 10;
  c.replication = replication;
  c.tiers.push_back({"nvme", dir.sub(name + "-nvme"), 1ull << 30});
  TierConfig pfs{"pfs", shared, pfs_quota};
  pfs.shared = true;
  pfs.miss_ttl_seconds = 0;  // the tests look again at once
  c.tiers.push_back(pfs);
  return c;
}

std::vector<uint8_t> Data(const std::string& key, size_t size = 600 << 10) {
  return Payload(size, std::hash<std::string>{}(key));
}

// Reads `keys` in one step; returns each chunk's result and checks the bytes of those read.
std::vector<ChunkResult> ReadKeys(Store& store, const std::vector<std::string>& keys,
                                  const std::function<std::vector<uint8_t>(const std::string&)>& expect = nullptr) {
  std::vector<std::vector<uint8_t>> buffers(keys.size(), std::vector<uint8_t>(1 << 20));
  std::vector<ChunkRead> reads;
  for (size_t i = 0; i < keys.size(); ++i) reads.push_back({keys[i], buffers[i].data(), buffers[i].size()});
  std::vector<ChunkResult> results;
  store.Retrieve(reads, &results);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!results[i].status.ok()) continue;
    const std::vector<uint8_t> want = expect ? expect(keys[i]) : Data(keys[i]);
    REQUIRE(results[i].size == want.size());
    REQUIRE(std::memcmp(buffers[i].data(), want.data(), want.size()) == 0);  // never other bytes
  }
  return results;
}

size_t OkCount(const std::vector<ChunkResult>& results) {
  size_t n = 0;
  for (const ChunkResult& r : results) n += r.status.ok();
  return n;
}

std::string Published(const std::string& shared, const std::string& key) {
  return shared + "/" + RelativeChunkPath(FileStem(key));
}
std::string Owned(const std::string& shared, const std::string& node, const std::string& key) {
  return shared + "/.nodes/" + node + "/" + RelativeChunkPath(FileStem(key));
}

const TierStats& TierNamed(const StoreStats& s, const std::string& name) {
  for (const TierStats& t : s.tiers) {
    if (t.name == name) return t;
  }
  FAIL("no tier " << name);
  return s.tiers[0];
}

TEST_CASE("two and four nodes on one shared directory read each other's chunks byte-identical") {
  const int nodes = GENERATE(2, 4);
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  std::vector<std::unique_ptr<Store>> stores;
  std::vector<std::vector<std::string>> keys(nodes);
  for (int n = 0; n < nodes; ++n) stores.push_back(OpenStoreOrSkip(Node(dir, "node" + std::to_string(n), shared)));
  for (int n = 0; n < nodes; ++n) {
    for (int i = 0; i < 6; ++i) {
      keys[n].push_back("n" + std::to_string(n) + "-chunk-" + std::to_string(i));
      const auto data = Data(keys[n].back());
      REQUIRE(stores[n]->Persist(keys[n].back(), data.data(), data.size()).ok());
    }
    stores[n]->Flush();
  }
  for (int n = 0; n < nodes; ++n) {
    const StoreStats s = stores[n]->Stats();
    CHECK(TierNamed(s, "pfs").shared);
    CHECK(TierNamed(s, "pfs").chunks == 6);  // its own, counted against its quota
    CHECK(TierNamed(s, "nvme").chunks == 6);
  }
  for (int reader = 0; reader < nodes; ++reader) {
    const int writer = (reader + 1) % nodes;
    // A lookup finds the other node's chunks on the shared tier alone.
    const std::vector<LookupEntry> found = stores[reader]->Lookup(keys[writer]);
    for (const LookupEntry& l : found) {
      CHECK(l.present);
      CHECK(l.tier_mask == 2u);
    }
    CHECK(stores[reader]->PrefixHits(keys[writer]) == keys[writer].size());
    const auto results = ReadKeys(*stores[reader], keys[writer]);
    CHECK(OkCount(results) == keys[writer].size());
    stores[reader]->Flush();
    // Cross-node reuse: what it read only from the shared tier is now on its own NVMe too.
    const StoreStats s = stores[reader]->Stats();
    CHECK(s.shared_copies == keys[writer].size());
    CHECK(TierNamed(s, "pfs").discovered >= keys[writer].size());
    CHECK(TierNamed(s, "pfs").foreign_chunks == keys[writer].size());
    CHECK(TierNamed(s, "pfs").chunks == 6);  // the foreign ones are not its own
    for (const LookupEntry& l : stores[reader]->Lookup(keys[writer])) CHECK(l.tier_mask == 3u);
    // The copies are valid: read again, the NVMe serves blocks of them and none fails its checksum
    // (they keep the checksums their bytes were verified against on the shared tier).
    const uint64_t nvme_before = TierNamed(stores[reader]->Stats(), "nvme").bytes_read;
    CHECK(OkCount(ReadKeys(*stores[reader], keys[writer])) == keys[writer].size());
    const StoreStats again = stores[reader]->Stats();
    CHECK(TierNamed(again, "nvme").bytes_read > nvme_before);
    CHECK(TierNamed(again, "nvme").checksum_failures == 0);
    CHECK(TierNamed(again, "nvme").chunks == 6 + keys[writer].size());
  }
  // Every published file is owned by exactly the node that wrote it.
  for (int n = 0; n < nodes; ++n) {
    for (const std::string& key : keys[n]) {
      CHECK(fs::hard_link_count(Published(shared, key)) == 2);
      for (int m = 0; m < nodes; ++m) CHECK(fs::exists(Owned(shared, "node" + std::to_string(m), key)) == (m == n));
    }
  }
}

TEST_CASE("a node name is served by one process at a time, nodes keep their chunks across a restart") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  auto a = OpenStoreOrSkip(Node(dir, "a", shared));
  StoreConfig again = Node(dir, "a", shared);
  again.tiers[0].path = dir.sub("a2-nvme");
  auto refused = Store::Open(again);
  REQUIRE(absl::IsFailedPrecondition(refused.status()));
  CHECK(std::string(refused.status().message()).find("node 'a'") != std::string::npos);
  const auto data = Data("kept");
  REQUIRE(a->Persist("kept", data.data(), data.size()).ok());
  a->Flush();
  a.reset();
  auto b = OpenStoreOrSkip(Node(dir, "b", shared));
  a = OpenStoreOrSkip(Node(dir, "a", shared));
  CHECK(TierNamed(a->Stats(), "pfs").chunks == 1);  // its own again, from its saved index
  CHECK(TierNamed(b->Stats(), "pfs").chunks == 0);  // b owns nothing there
  CHECK(OkCount(ReadKeys(*b, {"kept"})) == 1);
}

TEST_CASE("two nodes publishing the same keys at once: one file per key, one owner, every read intact") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  // Only the shared tier, so every persist races for the published name.
  auto only_shared = [&](const std::string& name) {
    StoreConfig c = Node(dir, name, shared);
    c.tiers.erase(c.tiers.begin());
    return c;
  };
  auto a = OpenStoreOrSkip(only_shared("a"));
  auto b = OpenStoreOrSkip(only_shared("b"));
  const bool same_bytes = GENERATE(true, false);
  std::vector<std::string> keys;
  for (int i = 0; i < 24; ++i) keys.push_back("raced-" + std::to_string(i));
  auto bytes_of = [&](const std::string& node, const std::string& key) {
    return same_bytes ? Data(key) : Data(node + key);
  };
  std::atomic<bool> go{false};
  std::vector<std::thread> writers;
  for (Store* s : {a.get(), b.get()}) {
    const std::string node = s == a.get() ? "a" : "b";
    writers.emplace_back([&, s, node] {
      while (!go) std::this_thread::yield();
      for (const std::string& key : keys) {
        const auto data = bytes_of(node, key);
        REQUIRE(s->Persist(key, data.data(), data.size()).ok());
      }
      s->Flush();
    });
  }
  go = true;
  for (auto& w : writers) w.join();
  for (const std::string& key : keys) {
    const bool by_a = fs::exists(Owned(shared, "a", key)), by_b = fs::exists(Owned(shared, "b", key));
    CHECK(by_a != by_b);  // exactly one owner
    CHECK(fs::hard_link_count(Published(shared, key)) == 2);
  }
  // Each node reads every key, and gets the version the file holds: never a mix, never bad bytes.
  for (Store* s : {a.get(), b.get()}) {
    std::vector<std::vector<uint8_t>> buffers(keys.size(), std::vector<uint8_t>(1 << 20));
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < keys.size(); ++i) reads.push_back({keys[i], buffers[i].data(), buffers[i].size()});
    std::vector<ChunkResult> results;
    s->Retrieve(reads, &results);
    size_t ok = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!results[i].status.ok()) {
        // Only where the other version won the name: this node's own version is nowhere
        // (this configuration has no other tier), so it is a miss, never the wrong bytes.
        CHECK(!same_bytes);
        CHECK(absl::IsNotFound(results[i].status));
        continue;
      }
      ++ok;
      const std::string owner = fs::exists(Owned(shared, "a", keys[i])) ? "a" : "b";
      const auto want = bytes_of(owner, keys[i]);
      REQUIRE(results[i].size == want.size());
      CHECK(std::memcmp(buffers[i].data(), want.data(), want.size()) == 0);
    }
    if (same_bytes) CHECK(ok == keys.size());
  }
}

TEST_CASE("eviction under a node's quota while another node reads: the reader gets its bytes or a miss") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  const uint64_t chunk_file = 600 * 1024 + 8192;  // about a chunk's file: header and padding
  // Node a holds at most 4 chunks on the shared tier; b reads them (and, with the shared tier
  // alone, keeps no copies of its own).
  StoreConfig ca = Node(dir, "a", shared, 4 * chunk_file + 4096);
  ca.tiers.erase(ca.tiers.begin());
  auto a = OpenStoreOrSkip(ca);
  StoreConfig cb = Node(dir, "b", shared);
  cb.tiers.erase(cb.tiers.begin());
  auto b = OpenStoreOrSkip(cb);
  std::atomic<bool> done{false};
  std::atomic<int> refused{0};
  std::vector<std::string> keys;
  for (int i = 0; i < 24; ++i) keys.push_back("evicted-" + std::to_string(i));
  std::thread writer([&] {
    for (const std::string& key : keys) {
      const auto data = Data(key);
      if (!a->Persist(key, data.data(), data.size()).ok()) ++refused;
      a->Flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the reader see each state
    }
    done = true;
  });
  size_t ok = 0, missed = 0;
  do {
    for (const ChunkResult& r : ReadKeys(*b, keys)) {  // every byte read is checked
      if (r.status.ok()) {
        ++ok;
      } else {
        REQUIRE(absl::IsNotFound(r.status));  // gone or never there: a miss, not a failure
        ++missed;
      }
    }
  } while (!done);
  writer.join();
  CHECK(refused == 0);
  CHECK(ok > 0);
  CHECK(missed > 0);
  const StoreStats sa = a->Stats();
  CHECK(TierNamed(sa, "pfs").chunks <= 4);
  CHECK(TierNamed(sa, "pfs").evictions >= 20);
  // After a's evictions, b finds exactly what is still there: the four newest.
  const auto results = ReadKeys(*b, keys);
  for (int i = 0; i < 24; ++i) CHECK(results[i].status.ok() == (i >= 20));
  CHECK(b->Stats().retrieve_failures == 0);
}

TEST_CASE("a torn, misnamed or corrupt file planted in the shared tier is a miss and is left alone") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  auto a = OpenStoreOrSkip(Node(dir, "a", shared));
  for (const std::string key : {"good", "source", "torn"}) {
    const auto data = Data(key);
    REQUIRE(a->Persist(key, data.data(), data.size()).ok());
  }
  a->Flush();
  auto b = OpenStoreOrSkip(Node(dir, "b", shared));
  // A torn file: a's published chunk cut short (a write another node's crash left half done).
  const std::string torn = Published(shared, "torn");
  fs::resize_file(torn, 300 << 10);
  // A whole, valid chunk file of another key under this key's name.
  const std::string misnamed = Published(shared, "misnamed");
  fs::create_directories(fs::path(misnamed).parent_path());
  fs::copy_file(Published(shared, "source"), misnamed);
  for (const std::string key : {"torn", "misnamed"}) {
    const auto l = b->Lookup({key});
    CHECK_FALSE(l[0].present);
    const auto r = ReadKeys(*b, {key});
    CHECK(absl::IsNotFound(r[0].status));
  }
  // A bit flipped in the payload of a published chunk (the header is intact): found, never
  // served; the read is a failure of that replica, not bad bytes.
  {
    const int fd = open(Published(shared, "good").c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    uint8_t byte = 0;
    REQUIRE(pread(fd, &byte, 1, 8192 + 1000) == 1);
    byte ^= 0x10;
    REQUIRE(pwrite(fd, &byte, 1, 8192 + 1000) == 1);
    close(fd);
  }
  // b holds no copy of its own: the bad file is a miss there, and lookups stop finding it.
  const auto r = ReadKeys(*b, {"good"});
  CHECK(absl::IsNotFound(r[0].status));
  CHECK(TierNamed(b->Stats(), "pfs").checksum_failures >= 1);
  CHECK(b->Stats().retrieve_failures == 0);
  CHECK_FALSE(b->Lookup({"good"})[0].present);
  CHECK(absl::IsNotFound(ReadKeys(*b, {"good"})[0].status));
  // b removed none of those files: they are not its own.
  CHECK(fs::exists(torn));
  CHECK(fs::exists(misnamed));
  CHECK(fs::exists(Published(shared, "good")));
  // a still serves its good chunk from its NVMe copy.
  CHECK(OkCount(ReadKeys(*a, {"good"})) == 1);
}

TEST_CASE("a crashed node's temporaries and half-published chunks are settled by its next start") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  {
    auto a = OpenStoreOrSkip(Node(dir, "a", shared));
    for (const std::string key : {"one", "two"}) {
      const auto data = Data(key);
      REQUIRE(a->Persist(key, data.data(), data.size()).ok());
    }
    a->Flush();
  }
  // What a kill -9 can leave: a temporary, and a chunk linked into the node's directory but not
  // yet published (the crash fell between the rename and the link). No saved index either.
  fs::remove(shared + "/.nodes/a/.kvstream.index");
  const std::string temp = Owned(shared, "a", "three") + ".tmp.999.1";
  fs::create_directories(fs::path(temp).parent_path());
  std::ofstream(temp) << "partial";
  fs::remove(Published(shared, "two"));
  auto b = OpenStoreOrSkip(Node(dir, "b", shared));
  CHECK(fs::exists(temp));  // b never touches a's directory
  CHECK_FALSE(b->Lookup({"two"})[0].present);
  auto a = OpenStoreOrSkip(Node(dir, "a", shared));
  CHECK_FALSE(fs::exists(temp));
  CHECK(fs::exists(Published(shared, "two")));  // published now
  CHECK(OkCount(ReadKeys(*b, {"one", "two"})) == 2);
}

// A node with only the shared tier: whatever it reads is another node's file.
StoreConfig OnlyShared(const TempDir& dir, const std::string& name, const std::string& shared) {
  StoreConfig c = Node(dir, name, shared);
  c.tiers.erase(c.tiers.begin());
  return c;
}

TEST_CASE("a node keeps at most foreign_chunks_limit other nodes' keys indexed and finds the rest again") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  auto writer = OpenStoreOrSkip(OnlyShared(dir, "writer", shared));
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) {
    keys.push_back("limited-" + std::to_string(i));
    const auto data = Data(keys.back());
    REQUIRE(writer->Persist(keys.back(), data.data(), data.size()).ok());
  }
  writer->Flush();
  StoreConfig c = OnlyShared(dir, "reader", shared);
  c.foreign_chunks_limit = 4;
  auto reader = OpenStoreOrSkip(c);
  // One step wants all 12: keys just found are never forgotten before it is placed.
  CHECK(OkCount(ReadKeys(*reader, keys)) == 12);
  CHECK(TierNamed(reader->Stats(), "pfs").foreign_chunks == 12);
  // A second later the next lookup brings the index back to the limit (the least recently used go).
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const auto data = Data("limited-new");
  REQUIRE(writer->Persist("limited-new", data.data(), data.size()).ok());
  writer->Flush();
  CHECK(reader->Lookup({"limited-new"})[0].present);
  CHECK(TierNamed(reader->Stats(), "pfs").foreign_chunks <= 5);
  // Forgotten keys are found again on the file system, byte-identical.
  CHECK(OkCount(ReadKeys(*reader, keys)) == 12);
  CHECK(TierNamed(reader->Stats(), "pfs").discovered >= 13 + 8);
}

TEST_CASE("a file its owner replaced or another node republished: the new version is read, never the old metadata") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  auto a = OpenStoreOrSkip(OnlyShared(dir, "a", shared));
  auto b = OpenStoreOrSkip(OnlyShared(dir, "b", shared));
  auto c = OpenStoreOrSkip(OnlyShared(dir, "c", shared));
  // d looks again only after a minute: within that, the version check at open is what stands.
  StoreConfig slow = OnlyShared(dir, "d", shared);
  slow.tiers[0].miss_ttl_seconds = 60;
  auto d = OpenStoreOrSkip(slow);
  const auto v1 = Payload(600 << 10, 1), v2 = Payload(700 << 10, 2), v3 = Payload(500 << 10, 3);
  auto read_one = [&](Store& s, const std::vector<uint8_t>& want) {
    return ReadKeys(s, {"k"}, [&](const std::string&) { return want; })[0];
  };
  REQUIRE(a->Persist("k", v1.data(), v1.size()).ok());
  a->Flush();
  REQUIRE(read_one(*b, v1).status.ok());  // b indexes a's v1 and keeps the file open
  REQUIRE(d->Lookup({"k"})[0].present);   // d indexes v1 without opening it
  // a rewrites its own key: b (looking again at once) reads v2; d, holding v1's metadata, opens
  // the file that is there now, sees another version and misses instead of failing.
  REQUIRE(a->Persist("k", v2.data(), v2.size()).ok());
  a->Flush();
  CHECK(fs::hard_link_count(Published(shared, "k")) == 2);
  ChunkResult r = read_one(*b, v2);
  REQUIRE(r.status.ok());
  CHECK(r.size == v2.size());
  CHECK(absl::IsNotFound(read_one(*d, v2).status));
  r = read_one(*d, v2);  // looked up again now that the index lacks it: v2
  REQUIRE(r.status.ok());
  // a evicts it and c publishes the key with other bytes: b's lookup stops promising a's file,
  // and b reads c's version.
  EvictRequest all;
  all.key = "k";
  REQUIRE(a->Evict(all).ok());
  CHECK_FALSE(fs::exists(Published(shared, "k")));
  CHECK_FALSE(b->Lookup({"k"})[0].present);
  REQUIRE(c->Persist("k", v3.data(), v3.size()).ok());
  c->Flush();
  r = read_one(*b, v3);
  REQUIRE(r.status.ok());
  CHECK(r.size == v3.size());
  for (Store* s : {b.get(), d.get()}) {
    CHECK(s->Stats().retrieve_failures == 0);
    CHECK(TierNamed(s->Stats(), "pfs").checksum_failures == 0);
  }
}

TEST_CASE("an own file found invalid at start leaves with its published name, so the key is free again") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  {
    auto a = OpenStoreOrSkip(OnlyShared(dir, "a", shared));
    const auto data = Data("k");
    REQUIRE(a->Persist("k", data.data(), data.size()).ok());
    a->Flush();
  }
  fs::remove(shared + "/.nodes/a/.kvstream.index");  // a crash: no saved index
  fs::resize_file(Owned(shared, "a", "k"), 4096);   // torn (the published name is the same file)
  auto a = OpenStoreOrSkip(OnlyShared(dir, "a", shared));
  CHECK_FALSE(fs::exists(Published(shared, "k")));
  CHECK_FALSE(fs::exists(Owned(shared, "a", "k")));
  auto b = OpenStoreOrSkip(OnlyShared(dir, "b", shared));
  const auto data = Data("k");
  REQUIRE(b->Persist("k", data.data(), data.size()).ok());
  b->Flush();
  CHECK(fs::exists(Owned(shared, "b", "k")));
  CHECK(OkCount(ReadKeys(*a, {"k"})) == 1);
}

TEST_CASE("a prefix lookup finds chunks on the shared tier on either side of one held locally") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  auto a = OpenStoreOrSkip(Node(dir, "a", shared));
  auto b = OpenStoreOrSkip(Node(dir, "b", shared));
  for (const std::string key : {"p0", "p2"}) {
    const auto data = Data(key);
    REQUIRE(a->Persist(key, data.data(), data.size()).ok());
  }
  a->Flush();
  const auto data = Data("p1");
  REQUIRE(b->Persist("p1", data.data(), data.size()).ok());
  b->Flush();
  CHECK(b->PrefixHits({"p0", "p1", "p2", "p3"}) == 3);
}

TEST_CASE("a private store and shared nodes never use one directory at once") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  StoreConfig priv;
  priv.block_size = 256 << 10;
  priv.tiers.push_back({"pfs", shared, 1ull << 30});
  {
    auto node = OpenStoreOrSkip(OnlyShared(dir, "a", shared));
    auto refused = Store::Open(priv);
    REQUIRE(absl::IsFailedPrecondition(refused.status()));
  }
  auto owner = OpenStoreOrSkip(priv);
  auto refused = Store::Open(OnlyShared(dir, "a", shared));
  REQUIRE(absl::IsFailedPrecondition(refused.status()));
  CHECK(std::string(refused.status().message()).find("does not share it") != std::string::npos);
}

// A cluster key file of 32 `fill` bytes, mode 0600.
std::string KeyFile(const TempDir& dir, const std::string& name, char fill) {
  const std::string path = dir.sub(name);
  std::ofstream(path) << std::string(32, fill);
  chmod(path.c_str(), 0600);
  return path;
}

StoreConfig WithKey(StoreConfig c, const std::string& key_file) {
  c.shared_key_file = key_file;
  return c;
}

std::vector<uint8_t> FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Changes the creation time in a chunk file's header and seals it again, as anyone who can write
// the shared tier can (the header checksum is no secret).
void ForgeCreationTime(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  std::vector<uint8_t> header(4096);
  REQUIRE(pread(fd, header.data(), header.size(), 0) == 4096);
  uint32_t header_size;
  std::memcpy(&header_size, header.data() + 12, 4);
  REQUIRE(header_size == 4096);
  int64_t created;
  std::memcpy(&created, header.data() + 32, 8);
  created += 1;
  std::memcpy(header.data() + 32, &created, 8);
  std::memset(header.data() + 56, 0, 8);
  const uint64_t checksum = Checksum(header.data(), header.size());
  std::memcpy(header.data() + 56, &checksum, 8);
  REQUIRE(pwrite(fd, header.data(), header.size(), 0) == 4096);
  close(fd);
  auto decoded = DecodeChunkHeader(header.data(), header.size());
  REQUIRE(decoded.ok());  // a valid header, but not one the key signed
}

TEST_CASE("with a cluster key, another node's chunk is served only if its MAC verifies") {
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  const std::string key = KeyFile(dir, "cluster.key", 'k');
  auto a = OpenStoreOrSkip(WithKey(Node(dir, "a", shared), key));
  auto x = OpenStoreOrSkip(WithKey(Node(dir, "x", shared), KeyFile(dir, "other.key", 'o')));
  auto y = OpenStoreOrSkip(Node(dir, "y", shared));  // no key at all
  for (const std::string k : {"signed", "forged"}) {
    const auto data = Data(k);
    REQUIRE(a->Persist(k, data.data(), data.size()).ok());
  }
  const auto wrong = Data("wrong-key"), unsigned_data = Data("unsigned");
  REQUIRE(x->Persist("wrong-key", wrong.data(), wrong.size()).ok());
  REQUIRE(y->Persist("unsigned", unsigned_data.data(), unsigned_data.size()).ok());
  a->Flush();
  x->Flush();
  y->Flush();

  // Every tier gets the same signed image: the NVMe replica and the published file are identical.
  const std::string nvme_copy = dir.sub("a-nvme") + "/" + RelativeChunkPath(FileStem("signed"));
  const auto published = FileBytes(Published(shared, "signed"));
  CHECK(FileBytes(nvme_copy) == published);
  auto header = DecodeChunkHeader(published.data(), published.size());
  REQUIRE(header.ok());
  CHECK(header->mac.has_value());
  ForgeCreationTime(Published(shared, "forged"));

  auto b = OpenStoreOrSkip(WithKey(Node(dir, "b", shared), key));
  CHECK(b->Lookup({"signed"})[0].present);
  CHECK(OkCount(ReadKeys(*b, {"signed"})) == 1);  // byte-identical (ReadKeys compares)
  for (const std::string k : {"wrong-key", "unsigned", "forged"}) {
    INFO(k);
    CHECK_FALSE(b->Lookup({k})[0].present);
    CHECK(absl::IsNotFound(ReadKeys(*b, {k})[0].status));
    CHECK(fs::exists(Published(shared, k)));  // another node's file: left alone
  }
  // A node without the key serves what it finds: it checks checksums only.
  CHECK(OkCount(ReadKeys(*y, {"signed", "wrong-key"})) == 2);

  // Restarted, a node with the key reads its saved index (with the MACs) and serves its chunks.
  a.reset();
  b.reset();
  a = OpenStoreOrSkip(WithKey(Node(dir, "a", shared), key));
  CHECK(TierNamed(a->Stats(), "pfs").chunks == 2);
  b = OpenStoreOrSkip(WithKey(Node(dir, "b", shared), key));
  CHECK(OkCount(ReadKeys(*b, {"signed"})) == 1);
  CHECK(fs::exists(Published(shared, "unsigned")));
}

TEST_CASE("with a cluster key, a payload forged to keep its XXH3 segment checksums is never served") {
  // The header, its checksum, the segment checksums and the MAC stay exactly as node a wrote them;
  // only the payload is the attacker's (tests/support/xxh3_forgery.h). The MAC, which covers the
  // segment checksums, cannot catch it; the segment tags do.
  TempDir dir;
  const std::string shared = dir.sub("pfs");
  const std::string key = KeyFile(dir, "cluster.key", 'k');
  auto a = OpenStoreOrSkip(WithKey(Node(dir, "a", shared), key));
  const auto data = Data("victim");
  REQUIRE(a->Persist("victim", data.data(), data.size()).ok());
  a->Flush();
  a.reset();
  const std::string file = Published(shared, "victim");
  const auto header_before = FileBytes(file);
  const absl::StatusOr<size_t> changed = ForgeChunkPayload(file, 'A');
  REQUIRE(changed.ok());
  CHECK(*changed > data.size() / 2);
  const auto forged = FileBytes(file);
  REQUIRE(std::equal(forged.begin(), forged.begin() + 4096, header_before.begin()));  // the header is intact

  auto b = OpenStoreOrSkip(WithKey(Node(dir, "b", shared), key));
  REQUIRE(b->Lookup({"victim"})[0].present);  // its header is valid and signed
  const auto results = ReadKeys(*b, {"victim"});  // would fail on other bytes than node a's
  CHECK_FALSE(results[0].status.ok());
  CHECK_FALSE(b->Lookup({"victim"})[0].present);  // and the forged version is not looked up again
  CHECK(fs::exists(file));                          // another node's file: left alone
  b.reset();
  // Node a itself reads it from its private tier (its own bytes, verified by their checksums).
  a = OpenStoreOrSkip(WithKey(Node(dir, "a", shared), key));
  CHECK(OkCount(ReadKeys(*a, {"victim"})) == 1);
}

TEST_CASE("a cluster key file that others may read is refused at open") {
  TempDir dir;
  const std::string key = KeyFile(dir, "cluster.key", 'k');
  chmod(key.c_str(), 0644);
  auto refused = Store::Open(WithKey(Node(dir, "a", dir.sub("pfs")), key));
  REQUIRE(absl::IsPermissionDenied(refused.status()));
  CHECK(std::string(refused.status().message()).find("0644") != std::string::npos);
  StoreConfig unverified = WithKey(Node(dir, "a", dir.sub("pfs")), key);
  unverified.verify_checksums = false;
  CHECK(absl::IsInvalidArgument(Store::Open(unverified).status()));
}

}  // namespace
}  // namespace kvstream::testing
