// The XML documents of S3's answers, parsed with expat as hostile input: no DTD (so no entities
// of its own), elements at most 16 deep, each element's text at most 4 KiB, keys at most 1024
// bytes, sizes as decimal integers checked for overflow, listings at most `max_objects`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "s3/s3_client.h"

namespace kvstream {

inline constexpr size_t kS3MaxKeyBytes = 1024;

struct S3ErrorXml {
  std::string code;     // NoSuchKey, SlowDown, ...
  std::string message;  // for people
};
// The <Error> document of a failed answer (or of a 200 answer to CompleteMultipartUpload, which
// S3 may send after its headers): its Code and Message; nullopt when `body` is not one.
std::optional<S3ErrorXml> ParseS3Error(std::string_view body);

// InitiateMultipartUploadResult's UploadId (not empty).
absl::StatusOr<std::string> ParseUploadId(std::string_view body);

// CompleteMultipartUploadResult's ETag ("" when it has none); DataLoss when not well-formed.
absl::StatusOr<std::string> ParseCompleteEtag(std::string_view body);

// The CompleteMultipartUpload request's body: part i + 1 with `etags[i]`.
std::string CompleteMultipartBody(const std::vector<std::string>& etags);

struct S3ListPage {
  std::vector<S3ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, not empty when truncated
};
// One ListObjectsV2 answer (ListBucketResult). More than `max_objects` objects:
// ResourceExhausted; anything malformed: DataLoss naming what.
absl::StatusOr<S3ListPage> ParseListPage(std::string_view body, size_t max_objects);

// A decimal unsigned integer of 1 to 20 digits that fits 64 bits; nullopt otherwise.
std::optional<uint64_t> ParseDecimal(std::string_view text);

}  // namespace kvstream
