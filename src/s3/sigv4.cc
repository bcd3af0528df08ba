#include "s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

namespace kvstream {
namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string Hex(const unsigned char* bytes, size_t size) {
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

struct Mac {
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
};

Mac HmacSha256(const void* key, size_t key_size, std::string_view data) {
  Mac mac;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_size), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac.bytes, &mac.size) == nullptr) {
    std::abort();  // only on allocation failure inside libcrypto
  }
  return mac;
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

bool Space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A header value as signed: no leading or trailing white space, each run inside one space (an
// obsolete folded line is one value).
std::string TrimAll(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (Space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_size = 0;
  if (EVP_Digest(data, size, md, &md_size, EVP_sha256(), nullptr) != 1) std::abort();
  return Hex(md, md_size);
}

std::string UriEncode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back("0123456789ABCDEF"[c >> 4]);
      out.push_back("0123456789ABCDEF"[c & 15]);
    }
  }
  return out;
}

std::string CanonicalQueryString(std::vector<std::pair<std::string, std::string>> params, bool keep_slash_in_values) {
  for (auto& [name, value] : params) {
    name = UriEncode(name, false);
    value = UriEncode(value, keep_slash_in_values);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out.push_back('&');
    out += name;
    out.push_back('=');
    out += value;
  }
  return out;
}

SigV4Signed SignV4(const SigV4Request& request, const SigV4Key& key, int64_t unix_seconds,
                   bool content_sha256_header) {
  SigV4Signed signed_request;
  const std::string amz_date = AmzDate(unix_seconds);
  const std::string date = amz_date.substr(0, 8);
  signed_request.added_headers.emplace_back("x-amz-date", amz_date);
  if (content_sha256_header) signed_request.added_headers.emplace_back("x-amz-content-sha256", request.payload_sha256);
  if (!key.session_token.empty()) signed_request.added_headers.emplace_back("x-amz-security-token", key.session_token);

  // Canonical headers: lowercase names, sorted; a repeated name's values joined in order.
  std::vector<std::pair<std::string, std::string>> headers;
  using HeaderList = std::vector<std::pair<std::string, std::string>>;
  const HeaderList* lists[] = {&request.headers, &signed_request.added_headers};
  for (const HeaderList* list : lists) {
    for (const auto& [name, value] : *list) headers.emplace_back(Lower(name), TrimAll(value));
  }
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers, signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.back() = ',';  // the previous value's '\n'
    } else {
      if (!signed_headers.empty()) signed_headers.push_back(';');
      signed_headers += headers[i].first;
      canonical_headers += headers[i].first;
      canonical_headers.push_back(':');
    }
    canonical_headers += headers[i].second;
    canonical_headers.push_back('\n');
  }

  signed_request.encoded_path = UriEncode(request.path.empty() ? "/" : request.path, true);
  signed_request.canonical_query = CanonicalQueryString(request.query, request.query_slash_as_is);
  std::string& creq = signed_request.canonical_request;
  creq = request.method + '\n' + signed_request.encoded_path + '\n' + signed_request.canonical_query + '\n' +
         canonical_headers + '\n' + signed_headers + '\n' + request.payload_sha256;

  const std::string scope = date + '/' + key.region + '/' + key.service + "/aws4_request";
  signed_request.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + '\n' + scope + '\n' + Sha256Hex(creq.data(), creq.size());

  std::string secret = "AWS4" + key.secret_access_key;
  Mac k = HmacSha256(secret.data(), secret.size(), date);
  OPENSSL_cleanse(secret.data(), secret.size());
  k = HmacSha256(k.bytes, k.size, key.region);
  k = HmacSha256(k.bytes, k.size, key.service);
  k = HmacSha256(k.bytes, k.size, "aws4_request");
  const Mac signature = HmacSha256(k.bytes, k.size, signed_request.string_to_sign);
  signed_request.signature = Hex(signature.bytes, signature.size);
  signed_request.authorization = "AWS4-HMAC-SHA256 Credential=" + key.access_key_id + '/' + scope +
                                 ", SignedHeaders=" + signed_headers + ", Signature=" + signed_request.signature;
  return signed_request;
}

}  // namespace kvstream
