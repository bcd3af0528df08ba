// S3Client: an S3-compatible object store (AWS S3, MinIO, Ceph RGW, moto) over HTTP or HTTPS,
// through libcurl's multi interface: many requests in flight on one thread of the client's own,
// connections reused, every request signed (AWS Signature V4, s3/sigv4.h), retried with
// exponential backoff and jitter on 5xx, throttling (503 SlowDown) and dropped connections, and
// bounded by a connect timeout and a whole-request timeout.
//
// Asynchronous calls (Get, Put, Delete) return at once and call `done` later, on the client's
// thread, exactly once (also when cancelled or when the client is destroyed). Synchronous calls
// (Head, List, GetObject, PutObject, DeleteObject, CheckBucket) go through the same thread and
// wait for it: for start-up and for threads off the I/O loop, never for the loop.
//
// Every byte from the store is hostile: a ranged GET never writes past `length` bytes of `dest`
// (a longer body fails the request), listings are parsed with a real XML parser and bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstream {

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials
};

// Credentials from `file` (an AWS shared-credentials file: an INI `[profile]` section with
// aws_access_key_id, aws_secret_access_key and optionally aws_session_token), or, with `file`
// empty, from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
// The file must be a regular file, not a symlink, mode 0600 or stricter. A clear error otherwise.
absl::StatusOr<S3Credentials> LoadS3Credentials(const std::string& file, const std::string& profile = "default");

struct S3ClientOptions {
  std::string endpoint;   // scheme://host[:port], e.g. http://127.0.0.1:5000, https://s3.eu-west-1.amazonaws.com
  std::string bucket;
  std::string region = "us-east-1";
  bool virtual_hosted = false;  // bucket.host/key instead of host/bucket/key (path style)
  S3Credentials credentials;
  uint32_t max_in_flight = 64;   // HTTP requests at once (more are queued in the client)
  uint32_t max_connections = 64; // connections kept to the endpoint
  double connect_timeout_seconds = 2.0;
  double request_timeout_seconds = 30.0;  // whole request, each attempt
  uint32_t max_attempts = 5;              // first try included
  double retry_base_seconds = 0.05;       // backoff: base * 2^attempt, with full jitter, capped
  double retry_max_seconds = 2.0;
  bool verify_tls = true;   // https: verify the server's certificate and host name
  std::string ca_file;      // "" = the system's CA bundle
  uint64_t multipart_threshold = 64ull << 20;  // Put uses a multipart upload above this size
  uint64_t multipart_part_size = 16ull << 20;  // >= 5 MiB (S3's minimum); larger when 10000 parts would not do
  uint32_t multipart_parts_in_flight = 8;      // parts of one upload sent at once
  // PUT bodies signed (x-amz-content-sha256 their SHA-256, computed on the caller's thread in
  // Put: 0.85 ms of CPU per MiB on the development machine, which has SHA extensions), or sent
  // as UNSIGNED-PAYLOAD (then only TLS, if any, protects the bytes on the way).
  bool sign_payload = true;
  uint32_t list_page_size = 1000;  // max-keys of each ListObjectsV2 page (S3 caps it at 1000)
};

// What a request came to. Outcomes the caller acts on are classified; `message` is for people.
enum class S3Outcome : uint8_t {
  kOk,
  kNotFound,            // 404 NoSuchKey / NoSuchBucket
  kPreconditionFailed,  // 412 (a conditional PUT found the key already there)
  kDenied,              // 401/403: wrong credentials, signature, clock skew, policy
  kThrottled,           // 503 SlowDown / 429, still so after every attempt
  kServerError,         // other 5xx after every attempt
  kUnreachable,         // connection refused, host unknown, reset: no HTTP answer after every attempt
  kTimedOut,            // an attempt ran past its timeout, and so did the last
  kBadResponse,         // the answer broke the protocol: a body longer than asked, bad XML, bad range
  kCancelled,           // Cancel() or the client's destruction
  kFailed,              // anything else (4xx we do not expect)
};
const char* ToString(S3Outcome outcome);

struct S3Result {
  S3Outcome outcome = S3Outcome::kOk;
  int http_status = 0;       // of the last attempt; 0 when no answer came
  uint32_t attempts = 0;
  uint64_t bytes = 0;        // Get: body bytes written to dest
  uint64_t object_size = 0;  // Get: from Content-Range (the whole object's size) when given
  std::string etag;
  std::string message;       // "" when ok: the S3 error code and message, or curl's error
  bool ok() const { return outcome == S3Outcome::kOk; }
};

// An absl::Status for a failed result, naming the operation and key (NotFound, FailedPrecondition
// for kPreconditionFailed, PermissionDenied, Unavailable, DeadlineExceeded, DataLoss, Cancelled...).
absl::Status ToStatus(const S3Result& result, const std::string& what);

struct S3PutOptions {
  bool if_none_match = false;  // If-None-Match: * (publish once: kPreconditionFailed if it exists)
  std::vector<std::pair<std::string, std::string>> metadata;  // x-amz-meta-<name>: value
};

struct S3ListedObject {
  std::string key;  // the whole key, prefix included
  uint64_t size = 0;
  std::string etag;
};

class S3Client {
 public:
  using Done = absl::AnyInvocable<void(const S3Result&)>;
  using RequestId = uint64_t;

  // Starts the client's thread; makes no request (CheckBucket does).
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(S3ClientOptions options);
  // Cancels what is in flight or queued (each `done` is called with kCancelled) and joins.
  // Multipart uploads it cancels are aborted, given up to 2 s. REQUIRES: not called from a `done`.
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3ClientOptions& options() const;

  // Reads bytes [offset, offset + length) of `key` into `dest` (a ranged GET). REQUIRES: `dest`
  // stays valid until `done` is called. A body longer than `length` is kBadResponse; a shorter
  // one (the object ends first) is kOk with result.bytes < length, 0 when `offset` is at or past
  // the end (S3's 416). A server that ignores the range (200, the whole object) is taken only at
  // offset 0 and when the object fits in `length`. `length` 0 is kFailed.
  RequestId Get(const std::string& key, uint64_t offset, uint32_t length, void* dest, Done done);
  // Writes the object (a multipart upload above options.multipart_threshold, aborted on failure).
  // REQUIRES: `data` stays valid and unchanged until `done` is called. With
  // options.sign_payload, `data` is hashed before Put returns.
  RequestId Put(const std::string& key, const void* data, size_t size, S3PutOptions put, Done done);
  // kOk also when the key was not there (S3 itself answers 204 either way).
  RequestId Delete(const std::string& key, Done done);
  // The caller no longer wants the result: the transfer is stopped where possible; `done` is
  // still called (kCancelled, unless it had already finished). Unknown or finished ids: no-op.
  void Cancel(RequestId id);

  // Synchronous, through the same thread.
  absl::StatusOr<S3Result> Head(const std::string& key);  // object_size and etag; NotFound
  // Every object whose key starts with `prefix` (ListObjectsV2, page by page), at most
  // `max_objects` (more: ResourceExhausted).
  absl::StatusOr<std::vector<S3ListedObject>> List(const std::string& prefix, size_t max_objects);
  // The whole object, at most `max_bytes` (a longer one: ResourceExhausted, nothing returned).
  absl::StatusOr<std::string> GetObject(const std::string& key, size_t max_bytes);
  absl::Status PutObject(const std::string& key, const std::string& data, S3PutOptions put = {});
  absl::Status DeleteObject(const std::string& key);  // OK when already gone
  // The bucket exists and the credentials may use it (HEAD bucket): at start, so that wrong
  // credentials or a wrong bucket are a clear error naming what failed.
  absl::Status CheckBucket();
  // Creates the bucket (PUT bucket, with a LocationConstraint outside us-east-1); OK when this
  // account already owns it. For tests and set-up tools.
  absl::Status CreateBucket();

  // Counters, for metrics (read from any thread).
  uint64_t requests() const;   // HTTP attempts made
  uint64_t retries() const;    // attempts after the first
  uint64_t in_flight() const;  // HTTP requests in flight now
  uint64_t answers() const;    // attempts that got an HTTP answer, of any status (the store answers)
  uint64_t connects() const;   // connections opened (the rest of the requests reused one)

 private:
  struct Impl;
  explicit S3Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstream
