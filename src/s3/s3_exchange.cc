#include "s3/s3_exchange.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "s3/s3_xml.h"

namespace kvstream {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;  // of a failed answer, kept for its <Error>

bool Is2xx(long http) { return http >= 200 && http < 300; }

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return absl::ascii_tolower(static_cast<unsigned char>(x)) == absl::ascii_tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

bool ParseContentRange(std::string_view value, ContentRange* range) {
  *range = ContentRange{};
  value = TrimSpace(value);
  if (!value.starts_with("bytes ")) return false;
  value.remove_prefix(6);
  const size_t slash = value.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view span = value.substr(0, slash), total = value.substr(slash + 1);
  if (total != "*") {
    const std::optional<uint64_t> t = ParseDecimal(total);
    if (!t) return false;
    range->has_total = true;
    range->total = *t;
  }
  if (span == "*") return range->has_total;
  const size_t dash = span.find('-');
  if (dash == std::string_view::npos) return false;
  const std::optional<uint64_t> first = ParseDecimal(span.substr(0, dash)), last = ParseDecimal(span.substr(dash + 1));
  if (!first || !last || *last < *first || (range->has_total && *last >= range->total)) return false;
  range->has_range = true;
  range->first = *first;
  range->last = *last;
  return true;
}

void ResetAnswer(S3Exchange& ex) {
  ex.received = 0;
  ex.body_limit = 0;
  ex.body_started = ex.body_to_dest = ex.too_large = false;
  ex.bad_response.clear();
  ex.body_in.clear();
  ex.content_range.clear();
  ex.etag.clear();
  ex.bucket_region.clear();
  ex.error_code.clear();
  ex.has_content_length = false;
  ex.content_length = 0;
  ex.curl_error[0] = '\0';
}

void JudgeAnswer(S3Exchange& ex, CURLcode code, bool* retry) {
  S3Result& r = ex.result;
  const long http = r.http_status;
  r.etag = ex.etag;
  r.message.clear();
  if (!ex.bad_response.empty()) {
    r.outcome = S3Outcome::kBadResponse;
    r.message = ex.bad_response;
    return;
  }
  if (ex.too_large) {
    r.outcome = S3Outcome::kBadResponse;
    r.message = absl::StrCat("a body longer than ", ex.max_body, " bytes");
    return;
  }
  if (code != CURLE_OK) {
    r.message = absl::StrCat(curl_easy_strerror(code), ex.curl_error[0] ? ": " : "", ex.curl_error);
    switch (code) {
      case CURLE_OPERATION_TIMEDOUT:
        r.outcome = S3Outcome::kTimedOut;
        *retry = true;
        return;
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_CONNECT:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:
      case CURLE_PARTIAL_FILE:
      case CURLE_SSL_CONNECT_ERROR:
        r.outcome = S3Outcome::kUnreachable;
        *retry = true;
        return;
      case CURLE_WEIRD_SERVER_REPLY:
      case CURLE_BAD_CONTENT_ENCODING:
        r.outcome = S3Outcome::kBadResponse;
        return;
      default:
        r.outcome = S3Outcome::kFailed;
        return;
    }
  }

  std::optional<S3ErrorXml> error;
  if (Is2xx(http)) {
    if (ex.error_in_ok_body) error = ParseS3Error(ex.body_in);
    if (!error) {
      r.outcome = S3Outcome::kOk;
      if (ex.sink != S3Exchange::Sink::kRange) {
        if (ex.has_content_length) r.object_size = ex.content_length;
        r.bytes = ex.received;
        return;
      }
      // A ranged GET: 206 with exactly its range, or 200 (the whole object) only at offset 0.
      r.bytes = ex.received;
      if (http == 206) {
        ContentRange range;
        if (!ParseContentRange(ex.content_range, &range) || !range.has_range || range.first != ex.offset ||
            range.last - range.first >= ex.length || ex.received != range.last - range.first + 1) {
          r.outcome = S3Outcome::kBadResponse;
          r.message = absl::StrCat("206 with Content-Range '", ex.content_range, "' and ", ex.received,
                                   " bytes for ", ex.length, " bytes at ", ex.offset);
          return;
        }
        if (range.has_total) r.object_size = range.total;
      } else if (http == 200 && ex.offset == 0) {
        r.object_size = ex.received;
      } else {
        r.outcome = S3Outcome::kBadResponse;
        r.message = absl::StrCat("HTTP ", http, " to a ranged GET at offset ", ex.offset);
      }
      return;
    }
  } else if (ex.body_in.size() > 0) {
    error = ParseS3Error(ex.body_in);
  }

  const std::string code_name = error ? error->code : "";
  ex.error_code = code_name;
  r.message = absl::StrCat("HTTP ", http, error ? " " : "", code_name, error && !error->message.empty() ? ": " : "",
                           error ? error->message : "");
  if (!ex.bucket_region.empty()) absl::StrAppend(&r.message, " (the bucket is in region ", ex.bucket_region, ")");
  if (Is2xx(http)) {  // an <Error> in a 200: as S3 says of CompleteMultipartUpload, retried
    const bool throttled = code_name == "SlowDown";
    r.outcome = throttled ? S3Outcome::kThrottled
                          : (code_name == "InternalError" ? S3Outcome::kServerError : S3Outcome::kFailed);
    *retry = r.outcome != S3Outcome::kFailed;
    return;
  }
  if (ex.sink == S3Exchange::Sink::kRange && http == 416) {  // the range starts at or past the end
    r.outcome = S3Outcome::kOk;
    r.message.clear();
    r.bytes = 0;
    ContentRange range;
    if (ParseContentRange(ex.content_range, &range) && range.has_total) r.object_size = range.total;
    return;
  }
  if (http == 404) {
    r.outcome = S3Outcome::kNotFound;
  } else if (http == 412) {
    r.outcome = S3Outcome::kPreconditionFailed;
  } else if (http == 401 || http == 403) {
    r.outcome = S3Outcome::kDenied;
  } else if (http == 429 || (http == 503 && code_name == "SlowDown")) {
    r.outcome = S3Outcome::kThrottled;
    *retry = true;
  } else if (http == 500 || http == 502 || http == 503 || http == 504) {
    r.outcome = S3Outcome::kServerError;
    *retry = true;
  } else if (http == 400 && code_name == "RequestTimeout") {
    r.outcome = S3Outcome::kTimedOut;
    *retry = true;
  } else if (http == 409 && code_name == "ConditionalRequestConflict") {
    r.outcome = S3Outcome::kFailed;  // a conditional write raced another: the next try decides
    *retry = true;
  } else {
    r.outcome = http >= 500 ? S3Outcome::kServerError : S3Outcome::kFailed;
  }
}

size_t TakeAnswerHeader(char* data, size_t size, size_t count, void* exchange) {
  auto& ex = *static_cast<S3Exchange*>(exchange);
  const size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {  // a new answer (after a 100 Continue, say): its own headers
    ex.content_range.clear();
    ex.etag.clear();
    ex.bucket_region.clear();
    ex.has_content_length = false;
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  const std::string_view name = line.substr(0, colon), value = TrimSpace(line.substr(colon + 1));
  if (IEquals(name, "content-range")) {
    ex.content_range = value;
  } else if (IEquals(name, "etag")) {
    ex.etag = value;
  } else if (IEquals(name, "x-amz-bucket-region")) {
    ex.bucket_region = value.substr(0, 64);
  } else if (IEquals(name, "content-length")) {
    const std::optional<uint64_t> length = ParseDecimal(value);
    ex.has_content_length = length.has_value();
    ex.content_length = length.value_or(0);
  }
  return n;
}

size_t TakeAnswerBody(char* data, size_t size, size_t count, void* exchange) {
  auto& ex = *static_cast<S3Exchange*>(exchange);
  const size_t n = size * count;
  if (!ex.body_started) {
    ex.body_started = true;
    long http = 0;
    curl_easy_getinfo(ex.easy, CURLINFO_RESPONSE_CODE, &http);
    if (Is2xx(http) && ex.sink == S3Exchange::Sink::kRange) {
      if (http == 206) {
        ContentRange range;
        if (!ParseContentRange(ex.content_range, &range) || !range.has_range || range.first != ex.offset ||
            range.last - range.first >= ex.length) {
          ex.bad_response = absl::StrCat("206 with Content-Range '", ex.content_range, "' for ", ex.length,
                                         " bytes at ", ex.offset);
          return 0;  // stops the transfer
        }
        ex.body_limit = range.last - range.first + 1;
      } else if (http == 200 && ex.offset == 0) {  // the server ignored the range: the whole object
        if (ex.has_content_length && ex.content_length > ex.length) {
          ex.bad_response = absl::StrCat("200 with the whole object (", ex.content_length, " bytes) for ",
                                         ex.length, " bytes at 0");
          return 0;
        }
        ex.body_limit = ex.length;
      } else {
        ex.bad_response = absl::StrCat("HTTP ", http, " to a ranged GET at offset ", ex.offset);
        return 0;
      }
      ex.body_to_dest = true;
    } else if (Is2xx(http) && ex.sink == S3Exchange::Sink::kString) {
      ex.body_to_dest = true;
    }
  }
  if (!ex.body_to_dest) {  // a success's body nobody wants, or a failure's <Error>
    if (ex.body_in.size() < kMaxErrorBody) ex.body_in.append(data, std::min(n, kMaxErrorBody - ex.body_in.size()));
    ex.received += n;
    return n;
  }
  if (ex.sink == S3Exchange::Sink::kString) {
    if (n > ex.max_body - ex.body_in.size()) {
      ex.too_large = true;
      return 0;
    }
    ex.body_in.append(data, n);
    ex.received += n;
    return n;
  }
  if (n > ex.body_limit - ex.received) {  // never past `length`, nor past the range the answer named
    ex.bad_response = absl::StrCat("a body longer than the ", ex.body_limit, " bytes asked for at ", ex.offset);
    return 0;
  }
  std::memcpy(ex.dest + ex.received, data, n);
  ex.received += n;
  return n;
}

}  // namespace kvstream
