// AWS Signature Version 4 (header-based, payload in a single chunk), as S3 checks it: a pure
// function of the request, the credentials and a time passed in, so that AWS's published test
// vectors pin it down (tests/unit/s3/sigv4_test.cc).
//
// S3's canonical URI differs from the other services': the path is URI-encoded once, '/' kept,
// and never normalized ("a//b", "./" and "../" are parts of a key, not path steps). The encoded
// path and query this returns are the ones to put on the request line, so that what is sent is
// byte for byte what was signed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvstream {

// SHA-256 of no bytes, the payload hash of a request without a body.
inline constexpr char kEmptyPayloadSha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// The payload hash of a request whose body is not signed (x-amz-content-sha256: UNSIGNED-PAYLOAD).
inline constexpr char kUnsignedPayload[] = "UNSIGNED-PAYLOAD";

// Lowercase hex of SHA-256 of `size` bytes at `data` (OpenSSL's libcrypto).
std::string Sha256Hex(const void* data, size_t size);

// S3's URI encoding: every byte except the unreserved A-Z a-z 0-9 - . _ ~ as %XX (uppercase hex);
// '/' kept when `keep_slash` (a path), encoded otherwise (a query name or value).
std::string UriEncode(std::string_view text, bool keep_slash);

// The canonical query string of `params` (names and values not yet encoded): each encoded, sorted
// by encoded name then value, joined as name=value&... (a name without a value is "name=").
std::string CanonicalQueryString(std::vector<std::pair<std::string, std::string>> params,
                                 bool keep_slash_in_values = false);

struct SigV4Request {
  std::string method;  // GET, PUT, ...
  std::string path;    // absolute and not encoded: "/bucket/a key" (encoded here, '/' kept)
  std::vector<std::pair<std::string, std::string>> query;    // not encoded
  std::vector<std::pair<std::string, std::string>> headers;  // to sign, host among them; any case;
                                                             // a repeated name is joined with ','
  std::string payload_sha256;  // hex, kEmptyPayloadSha256 or kUnsignedPayload
  // '/' in query values kept as it is (sent and signed so), as AWS's Python SDK (botocore) does:
  // S3 takes either form, and some S3-compatible servers (moto) verify a signature only over the
  // query as they received it, which they decode and re-encode with '/' kept.
  bool query_slash_as_is = false;
};

struct SigV4Key {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials: then x-amz-security-token is signed
  std::string region;         // us-east-1
  std::string service;        // s3
};

struct SigV4Signed {
  std::string encoded_path;     // the request line's path
  std::string canonical_query;  // the request line's query ("" for none)
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
  // Headers to send besides the request's own (all signed): x-amz-date, x-amz-content-sha256
  // (when `content_sha256_header`), x-amz-security-token (with a session token).
  std::vector<std::pair<std::string, std::string>> added_headers;
};

// Signs `request` at `unix_seconds` (UTC). `content_sha256_header`: add and sign
// x-amz-content-sha256 (S3 requires it; AWS's generic test suite has none).
SigV4Signed SignV4(const SigV4Request& request, const SigV4Key& key, int64_t unix_seconds,
                   bool content_sha256_header = true);

}  // namespace kvstream
