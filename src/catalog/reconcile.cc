#include "catalog/reconcile.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "format/chunk_format.h"

namespace kvstream {

ReconcileReport ReconcileTier(const Tiers& tiers, int t, GuardedIndex* index, int64_t started_unix_ns,
                              const std::atomic<bool>& stop) {
  ReconcileReport report;
  TierDevice& device = *tiers[t]->device;
  // What the index held from before this run, taken before listing: a file listed missing was
  // then deleted after it was indexed (by eviction, which updates the index first, or outside).
  std::map<std::string, std::shared_ptr<const ChunkMeta>> indexed;  // by stem
  {
    absl::MutexLock lock(&index->mu());
    for (const ChunkMeta& m : index->get().Replicas(t)) {
      if (m.created_unix_ns >= started_unix_ns) continue;
      if (const IndexEntry* e = index->get().Find(m.key)) indexed[e->stem] = e->meta;
    }
  }
  absl::StatusOr<std::vector<ListedChunk>> listed = device.ListChunks();
  if (!listed.ok()) return report;  // the tier's condition check reports an unreachable tier
  std::map<std::string, uint64_t> on_disk;
  for (const ListedChunk& f : *listed) on_disk[f.stem] = f.file_size;

  std::vector<Victim> victims;
  for (const auto& [stem, meta] : indexed) {
    if (stop) return report;
    auto file = on_disk.find(stem);
    if (file != on_disk.end() && file->second == meta->file_size()) {
      ++report.checked;
      continue;
    }
    // Decided under the index lock against the file as it is now (one stat: the only file system
    // call made under that lock): the loop commits a file before it indexes it and unindexes a
    // replica before it removes its file.
    absl::MutexLock lock(&index->mu());
    const IndexEntry* e = index->get().Find(meta->key);
    if (e == nullptr || e->meta != meta || !(e->tiers & (1u << t))) continue;  // changed meanwhile
    const absl::StatusOr<uint64_t> size = device.ChunkFileSize(stem);
    if (size.ok() && *size == meta->file_size()) {
      ++report.checked;
      continue;
    }
    Victim v;
    index->get().RemoveReplica(meta->key, t, &v);
    if (size.ok()) {
      ++report.torn;
      victims.push_back(std::move(v));  // its file goes too
    } else if (absl::IsNotFound(size.status())) {
      ++report.missing;
    } else {
      ++report.unconfirmed;
    }
  }
  RemoveReplicaFiles(tiers, victims);
  victims.clear();

  std::vector<std::string> unwanted;  // files removed once the lock is released
  for (const auto& [stem, size] : on_disk) {
    if (stop) break;
    if (indexed.count(stem)) continue;
    absl::StatusOr<ScannedChunk> header = device.ReadChunkHeader(stem);
    if (header.ok() && header->meta.created_unix_ns >= started_unix_ns) continue;  // this run's
    absl::MutexLock lock(&index->mu());
    if (!header.ok() || FileStem(header->meta.key) != stem || header->file_size != header->meta.file_size()) {
      if (!header.ok() && absl::IsNotFound(header.status())) continue;  // gone meanwhile
      // Invalid: removed, unless the loop has indexed a replica of this stem since the listing.
      const IndexEntry* e = header.ok() ? index->get().Find(header->meta.key) : nullptr;
      if (e != nullptr && (e->tiers & (1u << t))) continue;
      ++report.removed;
      unwanted.push_back(stem);
      continue;
    }
    const IndexEntry* e = index->get().Find(header->meta.key);
    if (e != nullptr && (e->tiers & (1u << t))) continue;  // indexed meanwhile
    if (e != nullptr && e->tiers != 0 && e->meta->created_unix_ns > header->meta.created_unix_ns) {
      ++report.removed;  // an older version than the one the index serves
      unwanted.push_back(stem);
      continue;
    }
    ++report.added;
    std::vector<Victim> stale =
        index->get().AddReplica(t, std::make_shared<const ChunkMeta>(std::move(header->meta)));
    victims.insert(victims.end(), stale.begin(), stale.end());
  }
  for (const std::string& stem : unwanted) device.RemoveChunk(stem).IgnoreError();
  RemoveReplicaFiles(tiers, victims);
  return report;
}

}  // namespace kvstream
