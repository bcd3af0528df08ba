#include "kvstream/cuda_copier.h"

#include <cuda_runtime_api.h>

#include <string>

namespace kvstream {
namespace {

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaCopier>> CudaCopier::Create(Client& client) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky error
    return absl::UnavailableError(std::string("no CUDA device: ") +
                                  (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)));
  }
  if (client.arena() == nullptr) return absl::FailedPreconditionError("the client has no session arena");
  if (cudaError_t e = cudaHostRegister(client.arena(), client.arena_size(), cudaHostRegisterDefault); e != cudaSuccess) {
    return CudaError("cudaHostRegister(arena)", e);
  }
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    cudaHostUnregister(client.arena());
    return CudaError("cudaStreamCreate", e);
  }
  return std::unique_ptr<CudaCopier>(new CudaCopier(client.arena(), client.arena_size(), stream));
}

CudaCopier::~CudaCopier() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaHostUnregister(arena_);
}

absl::Status CudaCopier::CopyAsync(uint64_t offset, uint64_t size, void* device_dst) {
  if (size == 0 || offset > size_ || size > size_ - offset) {
    return absl::OutOfRangeError("copy range is outside the arena");
  }
  if (cudaError_t e = cudaMemcpyAsync(device_dst, arena_ + offset, size, cudaMemcpyHostToDevice,
                                      static_cast<cudaStream_t>(stream_));
      e != cudaSuccess) {
    return CudaError("cudaMemcpyAsync", e);
  }
  return absl::OkStatus();
}

absl::Status CudaCopier::Synchronize() {
  if (cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)); e != cudaSuccess) {
    return CudaError("cudaStreamSynchronize", e);
  }
  return absl::OkStatus();
}

}  // namespace kvstream
