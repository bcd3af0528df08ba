#include "persist_call.h"

#include <string>
#include <utility>

namespace kvstream {
PersistCall* PersistCall::Start(Store* store, Admitted admitted, StagingWorker* worker) {
  auto* call = new PersistCall(store, std::move(admitted));
  call->StageWithoutWaiting(worker);  // gRPC's reference keeps `call` alive until this returns
  return call;
}

PersistCall::PersistCall(Store* store, Admitted admitted)
    : store_(store),
      admitted_(std::move(admitted)),
      chunk_state_(admitted_.chunks.size()),
      pending_(admitted_.chunks.size() + 1) {}

void PersistCall::StageWithoutWaiting(StagingWorker* worker) {
  for (size_t i = 0; i < admitted_.chunks.size(); ++i) {
    const absl::Status staged = Stage(i, /*wait=*/false);
    if (absl::IsResourceExhausted(staged) && !store_->config().staging_drop_when_full) {
      // The staging's reference is held until StageRest settles, so the worker's `this` is live.
      worker->Add([this, i](const StagingWorker& w) { StageRest(i, w); });
      return;
    }
    Staged(i, staged);
  }
  Settle();  // the staging is over
}

void PersistCall::StageRest(size_t first, const StagingWorker& worker) {
  for (size_t i = first; i < admitted_.chunks.size(); ++i) {
    Staged(i, worker.stopping() ? absl::UnavailableError("kvstreamd is shutting down") : Stage(i, /*wait=*/true));
  }
  Settle();  // the staging is over; may delete this
}

absl::Status PersistCall::Stage(size_t i, bool wait) {
  const AdmittedChunk& c = admitted_.chunks[i];
  const ChunkTarget& target = c.target;
  auto on_written = [this, i](const std::string&, const PersistResult& r) { Written(i, r); };
  if (target.fd >= 0) {  // client memory that may shrink: copied out with pread
    return store_->PersistFromFile(c.key, FileRange{target.fd, target.fd_offset, c.length}, std::move(on_written), wait);
  }
  const uint8_t* data = target.data;
  return wait ? store_->Persist(c.key, data, c.length, std::move(on_written))
              : store_->TryPersist(c.key, data, c.length, std::move(on_written));
}

void PersistCall::Staged(size_t i, const absl::Status& status) {
  bool chunk_done = true;
  {
    absl::MutexLock lock(&state_mu_);
    ChunkState& st = chunk_state_[i];
    st.staged = true;
    PersistResult staged;
    staged.status = status;
    PushEvent(i, v1::PersistEvent::STAGED, staged);
    if (!status.ok()) {  // never staged: that is its final answer too
      PushEvent(i, v1::PersistEvent::WRITTEN, staged);
    } else if (st.early_written) {
      PushEvent(i, v1::PersistEvent::WRITTEN, *st.early_written);
    } else {
      chunk_done = false;  // Written settles it
    }
  }
  if (chunk_done) Settle();
}

void PersistCall::Written(size_t i, const PersistResult& result) {
  {
    absl::MutexLock lock(&state_mu_);
    ChunkState& st = chunk_state_[i];
    if (!st.staged) {  // STAGED goes first: Staged pushes this one after it
      st.early_written = result;
      return;
    }
    PushEvent(i, v1::PersistEvent::WRITTEN, result);
  }
  Settle();
}

void PersistCall::PushEvent(size_t i, v1::PersistEvent::Stage stage, const PersistResult& result) {
  v1::PersistEvent e;
  e.set_index(static_cast<uint32_t>(i));
  e.set_stage(stage);
  e.set_code(static_cast<int32_t>(result.status.code()));
  e.set_message(result.status.ok() ? result.lost_reason : std::string(result.status.message()));
  e.set_tier_mask(result.tier_mask);
  e.set_lost_mask(result.lost_mask);
  e.set_synced_mask(result.synced_mask);
  Push(std::move(e));
}

void PersistCall::Settle() {
  if (pending_.fetch_sub(1) != 1) return;
  Close();
  ProducerDone();  // may delete this
}

}  // namespace kvstream
