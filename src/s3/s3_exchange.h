// S3Exchange: one HTTP request to S3 and its answer, and how an answer is taken in: its headers
// and body as libcurl hands them over (a ranged GET's body straight into the caller's buffer,
// never past `length` nor past the range the answer names), then judged once the transfer is
// over: what it came to (S3Outcome) and whether another attempt may do better.
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "s3/s3_client.h"
#include "s3/sigv4.h"

namespace kvstream {

// Set up by the caller, then owned by the loop (s3/s3_loop.h).
struct S3Exchange {
  enum class Sink : uint8_t {
    kDiscard,  // a success's body is dropped
    kRange,    // a ranged GET: the body goes to dest, at most `length` bytes
    kString,   // the body goes to `body_in`, at most `max_body` bytes
  };

  // The request. `path` is not encoded ("/bucket/key"); headers besides host and x-amz-* are
  // signed too (range, if-none-match, x-amz-meta-*, content-type).
  std::string method = "GET";
  std::string path;
  std::vector<std::pair<std::string, std::string>> query, headers;
  const char* body = nullptr;  // sent as is; the caller's, or owned_body's
  size_t body_size = 0;
  std::string owned_body;
  std::string payload_sha256 = kEmptyPayloadSha256;
  bool internal = false;          // nobody waits for it (an abort): it goes on while the loop stops
  bool error_in_ok_body = false;  // a 200 may carry <Error> (CompleteMultipartUpload)

  // The answer.
  Sink sink = Sink::kDiscard;
  char* dest = nullptr;  // kRange
  uint64_t offset = 0;
  uint32_t length = 0;
  size_t max_body = 0;       // kString
  S3Result result;           // when done
  std::string body_in;       // kString: the body; otherwise a failed answer's, bounded
  bool too_large = false;    // kString: the body passed max_body (result kBadResponse)
  std::string bucket_region;  // x-amz-bucket-region of the last answer, if any
  std::string error_code;     // the <Error><Code> of the last answer, if any

  // On the loop, once: result.outcome is kCancelled when the exchange was cancelled.
  absl::AnyInvocable<void(S3Exchange&)> done;

  // The loop's own.
  enum class State : uint8_t { kReady, kRunning, kBackoff } state = State::kReady;
  uint64_t seq = 0;
  CURL* easy = nullptr;  // while running
  curl_slist* header_list = nullptr;
  size_t upload_offset = 0;

  // The answer in progress (ResetAnswer, TakeAnswer*).
  uint64_t received = 0;       // body bytes taken in
  uint64_t body_limit = 0;     // kRange: the most the answer may bring
  bool body_started = false;   // the first body bytes of this answer were seen
  bool body_to_dest = false;   // they go to dest
  std::string bad_response;    // why the answer broke the protocol ("" when it did not)
  std::string content_range, etag;
  uint64_t content_length = 0;
  bool has_content_length = false;
  char curl_error[CURL_ERROR_SIZE] = {};
};

// Before each attempt: the last answer forgotten.
void ResetAnswer(S3Exchange& ex);

// libcurl's CURLOPT_HEADERFUNCTION and CURLOPT_WRITEFUNCTION, with the exchange as their data.
size_t TakeAnswerHeader(char* data, size_t size, size_t count, void* exchange);
size_t TakeAnswerBody(char* data, size_t size, size_t count, void* exchange);

// Once the transfer is over (`code`, and ex.result.http_status set): ex.result's outcome,
// message, etag, bytes and object size; `*retry` when another attempt may do better (5xx,
// throttling, timeouts, dropped connections).
void JudgeAnswer(S3Exchange& ex, CURLcode code, bool* retry);

// "bytes FIRST-LAST/TOTAL" or "bytes */TOTAL" (TOTAL may be '*'), checked; false otherwise.
struct ContentRange {
  bool has_range = false;
  uint64_t first = 0, last = 0;
  bool has_total = false;
  uint64_t total = 0;
};
bool ParseContentRange(std::string_view value, ContentRange* range);

}  // namespace kvstream
