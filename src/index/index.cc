#include "index/index.h"

#include <algorithm>

#include "kvstream/key.h"

namespace kvstream {
namespace {
// Debian builds Abseil with its own string_view type.
absl::string_view Key(std::string_view s) { return {s.data(), s.size()}; }
// The writer MakeRoom makes room for when its tenant holds nothing yet.
const Tenant kNoTenant{};
}  // namespace

Index::Index(std::vector<uint64_t> capacities, uint64_t foreign_limit, TenantLimits tenants)
    : capacity_(std::move(capacities)),
      used_(capacity_.size(), 0),
      reserved_(capacity_.size(), 0),
      replicas_(capacity_.size(), 0),
      limits_(tenants),
      foreign_(capacity_.size(), 0),
      foreign_limit_(foreign_limit) {}

Tenant* Index::TenantOf(std::string_view key) {
  const std::string_view name = limits_.tier_share > 0 ? KeyNamespace(key) : std::string_view();
  auto [it, inserted] = tenants_.try_emplace(Key(name));
  if (inserted) {
    it->second.name = std::string(name);
    it->second.lru.resize(capacity_.size());
    it->second.used.assign(capacity_.size(), 0);
  }
  return &it->second;
}

const Tenant* Index::FindTenant(std::string_view name) const {
  auto it = tenants_.find(Key(name));
  return it == tenants_.end() ? nullptr : &it->second;
}

void Index::UncountLock(IndexEntry* e) {
  if (e->locked_bytes == 0) return;
  e->tenant->locked_bytes -= e->locked_bytes;
  e->tenant->locked.erase(e->locked_at);
  e->locked_bytes = 0;
}

void Index::ForgetEntry(IndexEntry* e) {
  UncountLock(e);
  if (--e->tenant->entries == 0) {
    const std::string name = e->tenant->name;  // the tenant owns the string erase would look up by
    tenants_.erase(name);
  }
}

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
  if (--it->second.read_pins == 0 && it->second.tiers == 0) {
    ForgetEntry(&it->second);
    entries_.erase(it);
  }
}

bool Index::Lock(IndexEntry* entry, int64_t until_ns, int64_t now_ns) {
  if (limits_.locked_bytes > 0 && entry->locked_bytes == 0) {
    Tenant& t = *entry->tenant;
    const uint64_t bytes = entry->meta->file_size();
    if (t.locked_bytes + bytes > limits_.locked_bytes) {
      // Locks whose lease ended (their clients never unlocked) no longer count.
      for (auto it = t.locked.begin(); it != t.locked.end();) {
        IndexEntry* held = *it++;
        if (!Locked(*held, now_ns)) UncountLock(held);
      }
      if (t.locked_bytes + bytes > limits_.locked_bytes) return false;
    }
    entry->locked_bytes = bytes;
    t.locked_bytes += bytes;
    entry->locked_at = t.locked.insert(t.locked.end(), entry);
  }
  ++entry->locks;
  entry->locked_until_ns = std::max(entry->locked_until_ns, until_ns);
  return true;
}

bool Index::Unlock(std::string_view key) {
  auto it = entries_.find(Key(key));
  if (it == entries_.end() || it->second.locks == 0) return false;
  if (--it->second.locks == 0) UncountLock(&it->second);
  return true;
}

void Index::Unlink(IndexEntry* e, int tier) {
  const uint32_t bit = 1u << tier;
  if (e->foreign & bit) {
    e->foreign &= ~bit;
    --foreign_[tier];
    if (e->foreign == 0) foreign_lru_.erase(e->foreign_lru);
  } else {
    e->tenant->lru[tier].erase(e->lru[tier]);
    e->tenant->used[tier] -= e->meta->file_size();
    used_[tier] -= e->meta->file_size();
    --replicas_[tier];
  }
  e->tiers &= ~bit;
  e->synced &= ~bit;
  if (e->tiers == 0) {
    --live_;
    UncountLock(e);  // a lock on nothing holds nothing
  }
}

std::vector<Victim> Index::AddReplica(int tier, std::shared_ptr<const ChunkMeta> meta, bool foreign, bool synced) {
  std::vector<Victim> stale;
  auto [it, inserted] = entries_.try_emplace(meta->key);
  IndexEntry& e = it->second;
  if (inserted) {
    e.stem = FileStem(meta->key);
    e.tenant = TenantOf(meta->key);
    ++e.tenant->entries;
  } else if (!SameVersion(*e.meta, *meta)) {
    for (int k = 0; k < tier_count(); ++k) {
      if (!(e.tiers & (1u << k))) continue;
      if (k != tier) stale.push_back({meta->key, e.stem, k, e.meta->file_size()});
      Unlink(&e, k);  // the new file replaced the old one on `tier` itself
    }
  }
  const uint32_t bit = 1u << tier;
  if ((e.tiers & bit) && (foreign || !(e.foreign & bit))) {  // same version again
    if (synced) e.synced |= bit;
    Touch(&e);
    return stale;
  }
  if (e.tiers & bit) Unlink(&e, tier);  // another node's file of it is now this node's own
  e.meta = std::move(meta);
  if (e.tiers == 0) ++live_;
  e.tiers |= bit;
  if (synced) e.synced |= bit;
  if (foreign) {
    if (e.foreign == 0) e.foreign_lru = foreign_lru_.insert(foreign_lru_.end(), &e);
    e.foreign |= bit;
    ++foreign_[tier];
  } else {
    std::list<IndexEntry*>& lru = e.tenant->lru[tier];
    e.lru[tier] = lru.insert(lru.end(), &e);
    e.tenant->used[tier] += e.meta->file_size();
    used_[tier] += e.meta->file_size();
    ++replicas_[tier];
  }
  return stale;
}

bool Index::RemoveReplica(std::string_view key, int tier, Victim* victim) {
  auto it = entries_.find(Key(key));
  if (it == entries_.end() || !(it->second.tiers & (1u << tier))) return false;
  IndexEntry& e = it->second;
  if (victim) *victim = {e.meta->key, e.stem, tier, e.meta->file_size()};
  Unlink(&e, tier);
  if (e.tiers == 0 && e.read_pins == 0) {
    ForgetEntry(&e);
    entries_.erase(it);
  }
  return true;
}

void Index::Touch(IndexEntry* e) {
  for (int k = 0; k < tier_count(); ++k) {
    std::list<IndexEntry*>& lru = e->tenant->lru[k];
    if (e->own() & (1u << k)) lru.splice(lru.end(), lru, e->lru[k]);
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
      ForgetEntry(e);
      entries_.erase(key);
    }
  }
  foreign_forgotten_ += forgotten;
  return forgotten;
}

std::vector<IndexEntry*> Index::ChooseVictims(int tier, uint64_t bytes, const Tenant* writer, uint64_t writing,
                                             bool skip_held, int64_t now_ns) {
  // Each tenant's load over its share of the tier (the writer's counting what it writes; writes
  // in progress count in the tier's total only) and its next candidate, least recently used first.
  struct Candidates {
    const Tenant* tenant;
    int64_t excess;
    std::list<IndexEntry*>::const_iterator next;
  };
  const auto share = static_cast<int64_t>(limits_.tier_share * static_cast<double>(capacity_[tier]));
  std::vector<Candidates> tenants;
  for (const auto& [name, t] : tenants_) {
    if (t.lru[tier].empty()) continue;
    const int64_t load = static_cast<int64_t>(t.used[tier]) + (&t == writer ? static_cast<int64_t>(writing) : 0);
    tenants.push_back({&t, load - share, t.lru[tier].begin()});
  }
  std::vector<IndexEntry*> chosen;
  uint64_t freed = 0;
  while (freed < bytes) {
    Candidates* from = nullptr;
    for (Candidates& c : tenants) {
      if (c.next == c.tenant->lru[tier].end()) continue;
      // Another tenant within its share never gives way to a writer.
      if (writer != nullptr && c.tenant != writer && c.excess <= 0) continue;
      if (from == nullptr || c.excess > from->excess ||
          (c.excess == from->excess && c.tenant->name < from->tenant->name)) {
        from = &c;
      }
    }
    if (from == nullptr) break;
    IndexEntry* e = *from->next++;
    if (skip_held && (e->read_pins > 0 || Locked(*e, now_ns))) continue;
    const uint64_t size = e->meta->file_size();
    chosen.push_back(e);
    freed += size;
    from->excess -= static_cast<int64_t>(size);
  }
  return chosen;
}

bool Index::MakeRoom(int tier, uint64_t bytes, int64_t now_ns, std::vector<Victim>* victims, std::string_view for_key) {
  const uint64_t cap = capacity_[tier];
  if (bytes > cap) return false;
  const uint64_t need = used_[tier] + reserved_[tier] + bytes;
  if (need <= cap) return true;
  const Tenant* writer = nullptr;
  if (bytes > 0 || !for_key.empty()) {
    writer = FindTenant(limits_.tier_share > 0 ? KeyNamespace(for_key) : std::string_view());
    if (writer == nullptr) writer = &kNoTenant;  // a tenant with nothing here yet
  }
  const std::vector<IndexEntry*> chosen = ChooseVictims(tier, need - cap, writer, bytes, /*skip_held=*/true, now_ns);
  uint64_t freeable = 0;
  for (const IndexEntry* e : chosen) freeable += e->meta->file_size();
  if (freeable < need - cap) return false;
  for (IndexEntry* e : chosen) {
    Victim v;
    RemoveReplica(std::string(e->meta->key), tier, &v);
    victims->push_back(std::move(v));
  }
  return true;
}

void Index::EvictLru(int tier, uint64_t bytes, std::vector<Victim>* victims) {
  for (IndexEntry* e : ChooseVictims(tier, bytes, /*writer=*/nullptr, 0, /*skip_held=*/false, 0)) {
    Victim v;
    RemoveReplica(std::string(e->meta->key), tier, &v);
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
  out.reserve(replicas_[tier]);
  for (const auto& [name, t] : tenants_) {
    for (const IndexEntry* e : t.lru[tier]) out.push_back(*e->meta);
  }
  return out;
}

}  // namespace kvstream
