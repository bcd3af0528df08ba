// StepReader (step_reader.h): placing a step. Each chunk is looked up in the index and the version
// found pinned against eviction; a bad key, a miss, a destination too small and a chunk with no
// payload finish at once, a chunk whose newest version is still in staging is copied from there,
// and the rest go to the pool as blocks.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "memory/client_memory.h"
#include "read/step_reader.h"

namespace kvstream {

ReadStep::ReadStep(std::vector<ChunkRead> requests) {
  reads.reserve(requests.size());
  for (ChunkRead& request : requests) reads.emplace_back().request = std::move(request);
}

void StepReader::Place(std::unique_ptr<ReadStep> owned, const Policies& policies) {
  ReadStep* step = owned.get();
  steps_.push_back(std::move(owned));
  const size_t n = step->reads.size();
  step->policies = policies;
  step->start_ns = reactor_->NowNs();
  step->use.resize(tiers_.size());
  std::vector<uint32_t> finished;  // delivered after the index lock is released
  // Served from staging (copied once the index lock is released; only this thread frees them).
  std::vector<std::pair<uint32_t, const StagedChunk*>> staged;
  {
    absl::MutexLock lock(&index_->mu());
    Index& index = index_->get();
    for (size_t i = 0; i < n; ++i) {
      ReadChunk& c = step->reads[i];
      const ChunkRead& read = c.request;
      ChunkResult& result = c.result;
      result.index = i;
      IndexEntry* e = nullptr;
      if (absl::Status s = ValidateKey(read.key); !s.ok()) {
        result.status = s;
      } else if (const StagedChunk* from = NewerInStaging(index.Find(read.key), read.key)) {
        const uint64_t size = from->meta->payload_size;
        if (read.dst == nullptr || read.dst_capacity < size) {
          result.status = absl::OutOfRangeError(
              absl::StrCat("destination of ", read.dst_capacity, " bytes is smaller than the chunk's ", size));
        } else {
          staged.emplace_back(static_cast<uint32_t>(i), from);
        }
      } else if (e = index.Find(read.key); e == nullptr || e->tiers == 0) {
        result.status = absl::NotFoundError(absl::StrCat("no tier holds '", read.key, "'"));
        e = nullptr;
      } else if (read.dst == nullptr || read.dst_capacity < e->meta->payload_size) {
        result.status = absl::OutOfRangeError(absl::StrCat("destination of ", read.dst_capacity,
                                                           " bytes is smaller than the chunk's ", e->meta->payload_size));
        e = nullptr;
      } else if (e->meta->segment_count() == 0) {  // cannot come from a valid file; never wait on it
        result.status = absl::DataLossError(absl::StrCat("'", read.key, "' has no payload"));
        e = nullptr;
      }
      if (e == nullptr) {
        step->AddChunk(0, 0);
        finished.push_back(static_cast<uint32_t>(i));
        continue;
      }
      index.Pin(e);
      index.Touch(e);
      c.meta = e->meta;
      c.stem = e->stem;
      c.foreign = e->foreign;
      step->eligible |= e->tiers;
      result.size = e->meta->payload_size;
      step->AddChunk(e->tiers, e->meta->segment_count());
    }
  }
  pool_->Add(step);
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (deadlines_.stalled(static_cast<int>(t))) pool_->ReleasePins(step, static_cast<int>(t));  // placed while t is stalled
  }
  for (const auto& [chunk, from] : staged) step->reads[chunk].result.status = CopyStaged(step, chunk, *from);
  for (uint32_t chunk : finished) Deliver(step, chunk, step->reads[chunk].result.status);
  if (step->unfinished == 0) {
    Finish(step);
    return;
  }
  DropGivenUpTiers(step);  // may finish it
}

const StagedChunk* StepReader::NewerInStaging(const IndexEntry* indexed, std::string_view key) const {
  const StagedChunk* newest = staging_->NewestStaged(key);
  if (newest == nullptr || indexed == nullptr || indexed->tiers == 0) return newest;
  return newest->meta->created_unix_ns >= indexed->meta->created_unix_ns ? newest : nullptr;
}

absl::Status StepReader::CopyStaged(ReadStep* step, uint32_t chunk, const StagedChunk& staged) {
  const ChunkRead& read = step->reads[chunk].request;
  const uint64_t size = staged.meta->payload_size;
  step->reads[chunk].result.size = size;
  if (read.dst_fd >= 0) return GuardedCopy(static_cast<uint8_t*>(read.dst), staged.payload(), size);
  std::memcpy(read.dst, staged.payload(), size);
  return absl::OkStatus();
}

}  // namespace kvstream
