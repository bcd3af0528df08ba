// A Put above options.multipart_threshold: CreateMultipartUpload, the parts uploaded in parallel
// (at most options.multipart_parts_in_flight at once), CompleteMultipartUpload (If-None-Match on
// it, as S3 checks a conditional multipart write there). A failed part or a failed completion
// aborts the upload (AbortMultipartUpload) before `done` is called; Cancel calls `done` at once
// and aborts behind it. Runs on the loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "s3/s3_client.h"
#include "s3/s3_loop.h"

namespace kvstream {

struct MultipartPutSpec {
  std::string path;  // of the object, not encoded
  const char* data = nullptr;
  size_t size = 0;
  size_t part_size = 0;
  std::vector<std::string> part_sha256;  // one per part: hex, or kUnsignedPayload
  std::vector<std::pair<std::string, std::string>> create_headers;  // x-amz-meta-*
  bool if_none_match = false;
};

// On the loop: starts the upload, registered under `id` for Cancel.
void StartMultipartPut(S3Loop* loop, uint64_t id, MultipartPutSpec spec, S3Client::Done done);

}  // namespace kvstream
