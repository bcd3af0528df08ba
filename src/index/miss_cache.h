// MissCache: names looked for in vain, each remembered until its miss ends, at most `capacity` of
// them. Past the capacity the oldest is forgotten first (every miss of a cache lives as long, so
// the oldest ends first): one more look on the file system, never the whole cache dropped at
// once. Not thread-safe (its owner's lock guards it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kvstream {

class MissCache {
 public:
  explicit MissCache(size_t capacity) : capacity_(capacity) {}

  // True while `name` is remembered as missing at `now` (a miss that has ended is forgotten).
  bool Holds(const std::string& name, int64_t now) {
    auto it = until_.find(name);
    if (it == until_.end()) return false;
    if (now < it->second) return true;
    until_.erase(it);  // its entry in order_ goes when it reaches the front
    return false;
  }

  // Remembers `name` as missing until `ends` (>= every earlier miss's end).
  void Add(const std::string& name, int64_t ends, int64_t now) {
    // Forget what has ended, and the oldest while full. An entry of order_ whose name was
    // forgotten, or added again since, no longer matches until_ and is dropped alone.
    while (!order_.empty() && (order_.front().second <= now || until_.size() >= capacity_)) {
      auto it = until_.find(order_.front().first);
      if (it != until_.end() && it->second == order_.front().second) until_.erase(it);
      order_.pop_front();
    }
    until_[name] = ends;
    order_.emplace_back(name, ends);
  }

  size_t size() const { return until_.size(); }

 private:
  const size_t capacity_;
  absl::flat_hash_map<std::string, int64_t> until_;    // name -> missing until
  std::deque<std::pair<std::string, int64_t>> order_;  // as added (= as they end)
};

}  // namespace kvstream
