#include "catalog/recovery.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {

absl::Status RecoverIndex(const Tiers& tiers, Index* index, std::vector<bool>* from_checkpoint) {
  std::vector<std::pair<int, ScannedChunk>> all;
  if (from_checkpoint) from_checkpoint->assign(tiers.size(), false);
  for (size_t t = 0; t < tiers.size(); ++t) {
    absl::StatusOr<ScanReport> report = tiers[t]->device->Scan();
    if (!report.ok()) {
      return absl::Status(report.status().code(),
                          absl::StrCat("tier ", tiers[t]->name, ": scan failed: ", report.status().message()));
    }
    if (report->from_checkpoint) {
      if (from_checkpoint) (*from_checkpoint)[t] = true;
      spdlog::info("tier {}: {} chunks from the index saved at the last clean shutdown", tiers[t]->name,
                   report->chunks.size());
    } else {
      spdlog::info("tier {}: {} chunk files, removed {} temporaries and {} invalid files{}", tiers[t]->name,
                   report->chunks.size(), report->removed_temporaries, report->removed_invalid,
                   report->skipped_irregular == 0
                       ? ""
                       : absl::StrCat("; skipped ", report->skipped_irregular,
                                      " names that are not its regular files (not read, not removed)"));
    }
    for (ScannedChunk& c : report->chunks) all.emplace_back(static_cast<int>(t), std::move(c));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second.meta.created_unix_ns < b.second.meta.created_unix_ns;
  });
  std::vector<Victim> stale;
  for (auto& [tier, chunk] : all) {
    const IndexEntry* e = index->Find(chunk.meta.key);
    if (e != nullptr && !SameVersion(*e->meta, chunk.meta) && e->meta->created_unix_ns > chunk.meta.created_unix_ns) {
      stale.push_back({chunk.meta.key, FileStem(chunk.meta.key), tier, chunk.file_size});
      continue;
    }
    auto replaced = index->AddReplica(tier, std::make_shared<const ChunkMeta>(std::move(chunk.meta)));
    stale.insert(stale.end(), replaced.begin(), replaced.end());
  }
  for (size_t t = 0; t < tiers.size(); ++t) {
    const size_t before = stale.size();
    index->MakeRoom(static_cast<int>(t), 0, /*now_ns=*/0, &stale);  // no locks yet
    tiers[t]->counters.evictions += stale.size() - before;
  }
  RemoveReplicaFiles(tiers, stale);
  return absl::OkStatus();
}

void SaveIndexes(const Tiers& tiers, const Index& index) {
  for (size_t t = 0; t < tiers.size(); ++t) {
    const std::vector<ChunkMeta> chunks = index.Replicas(static_cast<int>(t));
    if (absl::Status s = tiers[t]->device->SaveIndex(chunks); !s.ok()) {
      spdlog::warn("tier {}: index not saved ({}); the next start reads every chunk header", tiers[t]->name,
                   std::string(s.message()));
    }
  }
}

}  // namespace kvstream
