#include "index/index.h"

#include <algorithm>

namespace kvstream {
namespace {
// Debian builds Abseil with its own string_view type.
absl::string_view Key(std::string_view s) { return {s.data(), s.size()}; }
}  // namespace

Index::Index(std::vector<uint64_t> capacities, uint64_t foreign_limit)
    : capacity_(std::move(capacities)),
      used_(capacity_.size(), 0),
      reserved_(capacity_.size(), 0),
      lru_(capacity_.size()),
      foreign_(capacity_.size(), 0),
      foreign_limit_(foreign_limit) {}

IndexEntry* Index::Find(std::string_view key) {
  auto it = entries_.find(Key(key));
  return it == entries_.end() ? nullptr : &it->second;
}

const IndexEntry* Index::Find(std::string_view key) const {
  auto it = entries_.find(Key(key));
  return it == entries_.end() ? nullptr : &it->second;
}

const IndexEntry* Index::FindLive(std::string_view key) const {
  const IndexEntry* e = Find(key);
  return e != nullptr && e->tiers != 0 ? e : nullptr;
}

void Index::Unpin(std::string_view key) {
  auto it = entries_.find(Key(key));
  if (it == entries_.end() || it->second.read_pins == 0) return;
  if (--it->second.read_pins == 0 && it->second.tiers == 0) entries_.erase(it);
}

void Index::Lock(IndexEntry* entry, int64_t until_ns) {
  ++entry->locks;
  entry->locked_until_ns = std::max(entry->locked_until_ns, until_ns);
}

bool Index::Unlock(std::string_view key) {
  auto it = entries_.find(Key(key));
  if (it == entries_.end() || it->second.locks == 0) return false;
  --it->second.locks;
  return true;
}

void Index::Unlink(IndexEntry* e, int tier) {
  const uint32_t bit = 1u << tier;
  if (e->foreign & bit) {
    e->foreign &= ~bit;
    --foreign_[tier];
    if (e->foreign == 0) foreign_lru_.erase(e->foreign_lru);
  } else {
    lru_[tier].erase(e->lru[tier]);
    used_[tier] -= e->meta->file_size();
  }
  e->tiers &= ~bit;
  if (e->tiers == 0) --live_;
}

std::vector<Victim> Index::AddReplica(int tier, std::shared_ptr<const ChunkMeta> meta, bool foreign) {
  std::vector<Victim> stale;
  auto [it, inserted] = entries_.try_emplace(meta->key);
  IndexEntry& e = it->second;
  if (inserted) {
    e.stem = FileStem(meta->key);
  } else if (!SameVersion(*e.meta, *meta)) {
    for (int k = 0; k < tier_count(); ++k) {
      if (!(e.tiers & (1u << k))) continue;
      if (k != tier) stale.push_back({meta->key, e.stem, k, e.meta->file_size()});
      Unlink(&e, k);  // the new file replaced the old one on `tier` itself
    }
  }
  const uint32_t bit = 1u << tier;
  if ((e.tiers & bit) && (foreign || !(e.foreign & bit))) {  // same version again
    Touch(&e);
    return stale;
  }
  if (e.tiers & bit) Unlink(&e, tier);  // another node's file of it is now this node's own
  e.meta = std::move(meta);
  if (e.tiers == 0) ++live_;
  e.tiers |= bit;
  if (foreign) {
    if (e.foreign == 0) e.foreign_lru = foreign_lru_.insert(foreign_lru_.end(), &e);
    e.foreign |= bit;
    ++foreign_[tier];
  } else {
    e.lru[tier] = lru_[tier].insert(lru_[tier].end(), &e);
    used_[tier] += e.meta->file_size();
  }
  return stale;
}

bool Index::RemoveReplica(std::string_view key, int tier, Victim* victim) {
  auto it = entries_.find(Key(key));
  if (it == entries_.end() || !(it->second.tiers & (1u << tier))) return false;
  IndexEntry& e = it->second;
  if (victim) *victim = {e.meta->key, e.stem, tier, e.meta->file_size()};
  Unlink(&e, tier);
  if (e.tiers == 0 && e.read_pins == 0) entries_.erase(it);
  return true;
}

void Index::Touch(IndexEntry* e) {
  for (int k = 0; k < tier_count(); ++k) {
    if (e->own() & (1u << k)) lru_[k].splice(lru_[k].end(), lru_[k], e->lru[k]);
  }
  if (e->foreign != 0) foreign_lru_.splice(foreign_lru_.end(), foreign_lru_, e->foreign_lru);
}

uint64_t Index::ForgetForeign(int64_t now_ns, int64_t found_since_ns) {
  uint64_t forgotten = 0;
  // Kept keys go to the back (they are in use), so a call looks at each at most once and the
  // next call starts past them; at most this many looks per call (under the index lock).
  uint64_t looks = foreign_lru_.size() > foreign_limit_
                       ? std::min<uint64_t>(foreign_lru_.size(), foreign_lru_.size() - foreign_limit_ + 1024)
                       : 0;
  while (foreign_lru_.size() > foreign_limit_ && looks-- > 0) {
    IndexEntry* e = foreign_lru_.front();
    if (e->read_pins > 0 || Locked(*e, now_ns) || e->foreign_checked_ns >= found_since_ns) {
      foreign_lru_.splice(foreign_lru_.end(), foreign_lru_, e->foreign_lru);
      continue;
    }
    for (int k = 0; k < tier_count(); ++k) {
      if (e->foreign & (1u << k)) Unlink(e, k);
    }
    ++forgotten;
    if (e->tiers == 0) {
      const std::string key = e->meta->key;  // the entry owns the string erase would look up by
      entries_.erase(key);
    }
  }
  foreign_forgotten_ += forgotten;
  return forgotten;
}

bool Index::MakeRoom(int tier, uint64_t bytes, int64_t now_ns, std::vector<Victim>* victims) {
  const uint64_t cap = capacity_[tier];
  if (bytes > cap) return false;
  uint64_t freeable = 0;
  const uint64_t need = used_[tier] + reserved_[tier] + bytes;
  if (need <= cap) return true;
  std::vector<IndexEntry*> chosen;
  for (IndexEntry* e : lru_[tier]) {
    if (need - freeable <= cap) break;
    if (e->read_pins > 0 || Locked(*e, now_ns)) continue;
    chosen.push_back(e);
    freeable += e->meta->file_size();
  }
  if (need - freeable > cap) return false;
  for (IndexEntry* e : chosen) {
    Victim v;
    RemoveReplica(std::string(e->meta->key), tier, &v);
    victims->push_back(std::move(v));
  }
  return true;
}

void Index::EvictLru(int tier, uint64_t bytes, std::vector<Victim>* victims) {
  uint64_t freed = 0;
  while (freed < bytes && !lru_[tier].empty()) {
    IndexEntry* e = lru_[tier].front();
    Victim v;
    RemoveReplica(std::string(e->meta->key), tier, &v);
    freed += v.bytes;
    victims->push_back(std::move(v));
  }
}

uint64_t Index::DropTier(int tier) {
  std::vector<Victim> dropped;
  EvictLru(tier, UINT64_MAX, &dropped);
  uint64_t n = dropped.size();
  for (auto it = entries_.begin(); foreign_[tier] > 0 && it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.foreign & (1u << tier)) {
      RemoveReplica(std::string(it->first), tier);
      ++n;
    }
    it = next;
  }
  return n;
}

std::vector<ChunkMeta> Index::Replicas(int tier) const {
  std::vector<ChunkMeta> out;
  out.reserve(lru_[tier].size());
  for (const IndexEntry* e : lru_[tier]) out.push_back(*e->meta);
  return out;
}

}  // namespace kvstream
