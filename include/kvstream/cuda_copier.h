// CudaCopier (built with KVSTREAM_WITH_CUDA): registers a client's arena as pinned host memory
// once, then copies each retrieved chunk to a device pointer as soon as it lands, on a CUDA
// stream, so host-to-device copies overlap the reads still in flight.
//
//   auto copier = CudaCopier::Create(*client).value();
//   client->Retrieve(chunks, &results, [&](const ChunkResult& r) {
//     if (r.status.ok()) copier->CopyAsync(chunks[r.index].offset, r.size, device_ptrs[r.index]);
//   });
//   copier->Synchronize();
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream/client.h"

namespace kvstream {

class CudaCopier {
 public:
  // Unavailable when there is no CUDA device (or driver); the arena is then left as it is.
  static absl::StatusOr<std::unique_ptr<CudaCopier>> Create(Client& client);
  ~CudaCopier();  // synchronizes, then unregisters the arena

  // Queues a copy of arena[offset, offset + size) to `device_dst`. OutOfRange outside the arena.
  absl::Status CopyAsync(uint64_t offset, uint64_t size, void* device_dst);
  // Waits for every queued copy.
  absl::Status Synchronize();

 private:
  CudaCopier(uint8_t* arena, uint64_t size, void* stream) : arena_(arena), size_(size), stream_(stream) {}
  uint8_t* arena_;
  uint64_t size_;
  void* stream_;  // cudaStream_t
};

}  // namespace kvstream
