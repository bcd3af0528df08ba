#include "catalog/shared_lookup.h"

#include <algorithm>

#include "format/chunk_format.h"

namespace kvstream {
namespace {
constexpr int64_t kForgetGraceNs = 1'000'000'000;  // from a lookup to its step's placement, at most
}  // namespace

SharedLookup::SharedLookup(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, Reactor* reactor)
    : tiers_(tiers), index_(index), reactor_(reactor) {
  for (size_t t = 0; t < config.tiers.size(); ++t) {
    if (!config.tiers[t].shared) continue;
    auto s = std::make_unique<SharedTier>();
    s->tier = static_cast<int>(t);
    s->miss_ttl_ns = static_cast<int64_t>(config.tiers[t].miss_ttl_seconds * 1e9);
    recheck_ns_ = shared_.empty() ? s->miss_ttl_ns : std::min(recheck_ns_, s->miss_ttl_ns);
    shared_.push_back(std::move(s));
  }
}

void SharedLookup::Discover(const std::vector<std::string>& keys, bool prefix_only) {
  if (shared_.empty()) return;
  // Keys the index lacks, and keys held only in other nodes' files not checked for a while (their
  // owners may have removed or replaced them: a lookup should not promise them).
  std::vector<const std::string*> missing;
  std::vector<std::pair<const std::string*, uint32_t>> recheck;  // key, its foreign tiers
  const int64_t now = reactor_->NowNs();
  bool over_limit = false;
  {
    absl::ReaderMutexLock lock(&index_->mu());
    over_limit = index_->get_shared().foreign_over_limit();
    for (const std::string& key : keys) {
      const IndexEntry* e = index_->get_shared().FindLive(key);
      if (e == nullptr) {
        missing.push_back(&key);
      } else if (e->own() == 0 && now - e->foreign_checked_ns >= recheck_ns_) {
        recheck.emplace_back(&key, e->foreign);
      }
    }
  }
  if (over_limit) {
    // A key a call vouched for was found or checked at most recheck_ns_ before that call, and its
    // step is placed (pinned) well within kForgetGraceNs of it: such keys stay.
    absl::MutexLock lock(&index_->mu());
    index_->get().ForgetForeign(now, now - recheck_ns_ - kForgetGraceNs);
  }
  for (const auto& [key, tiers] : recheck) {
    if (!Recheck(*key, tiers, now)) missing.push_back(key);
  }
  for (const std::string* key : missing) {
    const std::string stem = FileStem(*key);
    bool found = false;
    for (auto& s : shared_) found = Find(*s, *key, stem) || found;
    if (prefix_only && !found) return;
  }
}

bool SharedLookup::Recheck(const std::string& key, uint32_t tiers, int64_t now) {
  const std::string stem = FileStem(key);
  bool any = false;
  for (auto& s : shared_) {
    if (!(tiers & (1u << s->tier))) continue;
    absl::StatusOr<ScannedChunk> header = tiers_[s->tier]->device->ReadChunkHeader(stem);
    absl::MutexLock lock(&index_->mu());
    Index& index = index_->get();
    IndexEntry* e = index.Find(key);
    if (e == nullptr || !(e->foreign & (1u << s->tier))) continue;  // changed meanwhile
    if (header.ok() && header->meta.key == key && VersionOf(header->meta) == VersionOf(*e->meta)) {
      e->foreign_checked_ns = now;
      any = true;
    } else {
      index.RemoveReplica(key, s->tier);  // gone or replaced: Find looks for what is there now
    }
  }
  return any;
}

bool SharedLookup::Find(SharedTier& s, const std::string& key, const std::string& stem) {
  Tier& tier = *tiers_[s.tier];
  if (!tier.readable) return false;
  const int64_t now = reactor_->NowNs();
  {
    absl::MutexLock lock(&s.mu);
    if (s.misses.Holds(stem, now)) return false;
  }
  // The device's header read resolves the published name from the tier's path alone (no state
  // the loop changes), so it is safe here, off the loop.
  absl::StatusOr<ScannedChunk> header = tier.device->ReadChunkHeader(stem);
  bool bad = false;
  if (header.ok()) {
    absl::MutexLock lock(&s.mu);
    auto it = s.bad.find(stem);
    bad = it != s.bad.end() && it->second == VersionOf(header->meta);
  }
  if (header.ok() && header->meta.key == key && !bad) {
    absl::MutexLock lock(&index_->mu());
    Index& index = index_->get();
    const IndexEntry* e = index.Find(key);
    // Indexed meanwhile (a write of this node, another lookup): that entry stands.
    if (e == nullptr || e->tiers == 0) {
      index.AddReplica(s.tier, std::make_shared<const ChunkMeta>(std::move(header->meta)), /*foreign=*/!header->owned);
      index.Find(key)->foreign_checked_ns = now;
    }
    absl::MutexLock count(&s.mu);
    ++s.discovered;
    return true;
  }
  absl::MutexLock lock(&s.mu);
  s.misses.Add(stem, now + s.miss_ttl_ns, now);
  return false;
}

void SharedLookup::MarkBad(int tier, const ChunkMeta& meta) {
  for (auto& s : shared_) {
    if (s->tier != tier) continue;
    absl::MutexLock lock(&s->mu);
    if (s->bad.size() >= kMaxRememberedMisses) s->bad.erase(s->bad.begin());  // one, not all
    s->bad[FileStem(meta.key)] = VersionOf(meta);
  }
}

uint64_t SharedLookup::discovered(int tier) const {
  for (const auto& s : shared_) {
    if (s->tier != tier) continue;
    absl::MutexLock lock(&s->mu);
    return s->discovered;
  }
  return 0;
}

}  // namespace kvstream
