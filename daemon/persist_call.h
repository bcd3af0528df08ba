// PersistCall: one admitted Persist. Stages the request's chunks from the session's arena (or its
// client regions: with pread from an unsealed one, client_region.h), in
// request order, and streams for each chunk first STAGED (copied out of the arena, or why not)
// and then WRITTEN (every replica written or failed, and which of them are synced; for a chunk
// never staged, the same error), even when the store reports it before staging returns. The
// stream closes once every chunk has its WRITTEN. Staging starts on gRPC's thread without blocking; when staging is full,
// the rest goes to the StagingWorker, which waits for space.
//
// Lifetime: gRPC holds one reference, the producers the other: the staging (gRPC's thread, then
// the worker) and the store's written callbacks together count as one, released when the staging
// is over and every chunk staged is written or failed (pending_). So neither the worker nor the store's I/O
// thread can see the call deleted while it may still call it.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "event_stream.h"
#include "kvstream.pb.h"
#include "kvstream/store.h"
#include "admission.h"
#include "staging_worker.h"

namespace kvstream {

class PersistCall final : public EventStream<v1::PersistEvent> {
 public:
  // `admitted` is what admission made of the request (see admission.h). The reactor returned is
  // gRPC's.
  static PersistCall* Start(Store* store, Admitted admitted, StagingWorker* worker);

 private:
  struct ChunkState {
    bool staged = false;  // its STAGED event is pushed
    std::optional<PersistResult> early_written;  // reported before STAGED was pushed
  };

  PersistCall(Store* store, Admitted admitted);

  // gRPC's thread: stages chunks until staging is full, then hands the rest to `worker`.
  void StageWithoutWaiting(StagingWorker* worker);
  // The worker: stages chunks [first, end), waiting for space, or refuses them once it stops.
  void StageRest(size_t first, const StagingWorker& worker);
  // Asks the store to stage chunk i; ResourceExhausted only when !wait and staging is full.
  absl::Status Stage(size_t i, bool wait);
  // The outcome of staging chunk i: pushes STAGED, then WRITTEN if that is known already.
  void Staged(size_t i, const absl::Status& status) ABSL_LOCKS_EXCLUDED(state_mu_);
  // The store's I/O thread (or inside Stage): chunk i is written or failed.
  void Written(size_t i, const PersistResult& result) ABSL_LOCKS_EXCLUDED(state_mu_);
  void PushEvent(size_t i, v1::PersistEvent::Stage stage, const PersistResult& result);
  // One of pending_ is done; the last one closes the stream and may delete this.
  void Settle();

  Store* const store_;
  const Admitted admitted_;  // its chunks; keeps the session and the client regions alive
  // Held while pushing a chunk's events, so that its STAGED always precedes its WRITTEN.
  absl::Mutex state_mu_;
  std::vector<ChunkState> chunk_state_ ABSL_GUARDED_BY(state_mu_);
  std::atomic<size_t> pending_;  // one per chunk (its WRITTEN) and one for the staging
};

}  // namespace kvstream
