// ReadHandleCache: the chunk files a tier keeps open for reads, by stem. A handle stays open
// while reads of it are in flight (ReadIssued .. ReadLanded) and is then kept, idle, up to a
// bound (least recently used closed first). Dropping a handle with reads in flight closes it
// only when the last of them lands, so the kernel never reads a closed (or reused) descriptor.
// Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "format/chunk_format.h"

namespace kvstream {

class ReadHandleCache {
 public:
  struct Handle {
    int fd = -1;
    int64_t checked_ns = 0;  // shared tiers: when the published name last led to this file
    ChunkVersion version;    // shared tiers: the version the file held when opened (its header)
  };

  explicit ReadHandleCache(size_t max_idle) : max_idle_(max_idle) {}
  ~ReadHandleCache();  // closes every handle (the rings have no reads in flight by then)
  ReadHandleCache(const ReadHandleCache&) = delete;
  ReadHandleCache& operator=(const ReadHandleCache&) = delete;

  // The open handle of `stem` (marked recently used), or null.
  Handle* Find(const std::string& stem);
  // Keeps `fd`, just opened, as the handle of `stem` (which has none), then trims idle handles.
  void Insert(const std::string& stem, Handle handle);
  // Forgets the handle of `stem`: closed now if idle, else once its reads have landed.
  void Drop(const std::string& stem);
  // Drop for every stem (the tier directory was made again).
  void DropAll();

  // The handle behind `fd`, or null (not cached: dropped, or never a read handle).
  const Handle* ByFd(int fd) const;
  // A read of `fd` was queued / has landed (its completion was reaped).
  void ReadIssued(int fd);
  void ReadLanded(int fd);

 private:
  struct Entry {
    Handle handle;
    uint32_t in_flight = 0;
    std::list<std::string>::iterator lru;  // valid while idle (in_flight == 0)
  };
  void Trim();

  const size_t max_idle_;
  absl::flat_hash_map<std::string, Entry> files_;  // stem -> its handle
  absl::flat_hash_map<int, std::string> stems_;    // fd -> stem, for the handles in files_
  absl::flat_hash_map<int, uint32_t> doomed_;      // dropped fd -> reads still in flight
  std::list<std::string> idle_lru_;                // stems of idle handles, oldest first
};

}  // namespace kvstream
