// SigV4 against AWS's published vectors: the signature version 4 test suite (as botocore carries
// it, tests/unit/auth/aws4_testsuite: credentials AKIDEXAMPLE, 20150830T123600Z, us-east-1,
// service "service") and the examples of the S3 API reference, "Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk" (AKIAIOSFODNN7EXAMPLE,
// 20130524T000000Z, examplebucket). Every expected value below is the published one.
#include "s3/sigv4.h"

#include <catch2/catch.hpp>

#include <string>

namespace kvstream {
namespace {

constexpr int64_t kSuiteTime = 1440938160;  // 20150830T123600Z
constexpr int64_t kS3DocsTime = 1369353600;  // 20130524T000000Z

SigV4Key SuiteKey() {
  return {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", "us-east-1", "service"};
}

SigV4Key S3DocsKey() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", "us-east-1", "s3"};
}

// A request of the generic suite: host example.amazonaws.com, no body unless given.
SigV4Request Suite(std::string method, std::string path, std::vector<std::pair<std::string, std::string>> query = {},
                   std::vector<std::pair<std::string, std::string>> headers = {}) {
  SigV4Request r{std::move(method), std::move(path), std::move(query), {{"Host", "example.amazonaws.com"}},
                 kEmptyPayloadSha256};
  for (auto& h : headers) r.headers.push_back(std::move(h));
  return r;
}

// The suite's requests carry no x-amz-content-sha256.
SigV4Signed SignSuite(const SigV4Request& r, SigV4Key key = SuiteKey()) {
  return SignV4(r, key, kSuiteTime, /*content_sha256_header=*/false);
}

std::string SuiteAuthorization(const std::string& signed_headers, const std::string& signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=" +
         signed_headers + ", Signature=" + signature;
}

TEST_CASE("get-vanilla: canonical request, string to sign and authorization are the suite's") {
  const SigV4Signed s = SignSuite(Suite("GET", "/"));
  CHECK(s.canonical_request ==
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  CHECK(s.authorization ==
        SuiteAuthorization("host;x-amz-date", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"));
  REQUIRE(s.added_headers.size() == 1);
  CHECK(s.added_headers[0] == std::pair<std::string, std::string>("x-amz-date", "20150830T123600Z"));
}

TEST_CASE("get-vanilla-query-order-key-case: query parameters are sorted by name, case-sensitively") {
  const SigV4Signed s = SignSuite(Suite("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}));
  CHECK(s.canonical_query == "Param1=value1&Param2=value2");
  CHECK(s.signature == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST_CASE("get-vanilla-query-order-encoded: parameters are sorted by their encoded names") {
  const SigV4Signed s =
      SignSuite(Suite("GET", "/", {{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xE1\x88\xB4", "Value1"}}));
  CHECK(s.canonical_query == "%E1%88%B4=Value1&Param=Value2&Param-3=Value3");
  CHECK(s.signature == "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac");
}

TEST_CASE("get-vanilla-utf8-query: a UTF-8 query name is percent-encoded byte by byte") {
  const SigV4Signed s = SignSuite(Suite("GET", "/", {{"\xE1\x88\xB4", "bar"}}));
  CHECK(s.canonical_query == "%E1%88%B4=bar");
  CHECK(s.signature == "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
}

TEST_CASE("get-vanilla-query-unreserved: unreserved characters are not encoded in the query") {
  const std::string unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const SigV4Signed s = SignSuite(Suite("GET", "/", {{unreserved, unreserved}}));
  CHECK(s.canonical_query == unreserved + "=" + unreserved);
  CHECK(s.signature == "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
}

TEST_CASE("post-vanilla-query: a POST with a query and no body") {
  CHECK(SignSuite(Suite("POST", "/", {{"Param1", "value1"}})).signature ==
        "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11");
}

TEST_CASE("get-unreserved: unreserved characters are not encoded in the path") {
  const SigV4Signed s = SignSuite(Suite("GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"));
  CHECK(s.signature == "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
}

TEST_CASE("get-utf8: a UTF-8 path is percent-encoded byte by byte") {
  const SigV4Signed s = SignSuite(Suite("GET", "/\xE1\x88\xB4"));
  CHECK(s.encoded_path == "/%E1%88%B4");
  CHECK(s.signature == "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

TEST_CASE("get-space: a space in the path is %20, its slashes kept") {
  const SigV4Signed s = SignSuite(Suite("GET", "/example space/"));
  CHECK(s.encoded_path == "/example%20space/");
  CHECK(s.authorization ==
        SuiteAuthorization("host;x-amz-date", "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"));
}

TEST_CASE("get-header-value-trim: header values are trimmed and their inner runs of spaces collapsed") {
  const SigV4Signed s = SignSuite(Suite("GET", "/", {}, {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}}));
  CHECK(s.canonical_request.find("my-header1:value1\nmy-header2:\"a b c\"\n") != std::string::npos);
  CHECK(s.authorization == SuiteAuthorization("host;my-header1;my-header2;x-amz-date",
                                              "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"));
}

TEST_CASE("get-header-key-duplicate: a repeated header's values are joined in order with commas") {
  const SigV4Signed s =
      SignSuite(Suite("GET", "/", {}, {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}}));
  CHECK(s.canonical_request.find("my-header1:value2,value2,value1\n") != std::string::npos);
  CHECK(s.signature == "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea");
}

TEST_CASE("get-header-value-multiline: a folded header value is one line with single spaces") {
  const SigV4Signed s = SignSuite(Suite("GET", "/", {}, {{"My-Header1", "value1\n  value2\n     value3"}}));
  CHECK(s.canonical_request.find("my-header1:value1 value2 value3\n") != std::string::npos);
  CHECK(s.signature == "cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd");
}

TEST_CASE("post-x-www-form-urlencoded: the body's hash and its content-type are signed") {
  const std::string body = "Param1=value1";
  SigV4Request r = Suite("POST", "/", {}, {{"Content-Type", "application/x-www-form-urlencoded"}});
  r.payload_sha256 = Sha256Hex(body.data(), body.size());
  CHECK(r.payload_sha256 == "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  const SigV4Signed s = SignSuite(r);
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281");
  CHECK(s.authorization == SuiteAuthorization("content-type;host;x-amz-date",
                                              "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"));
}

TEST_CASE("post-x-www-form-urlencoded-parameters: a content-type with parameters is signed as given") {
  const std::string body = "Param1=value1";
  SigV4Request r = Suite("POST", "/", {}, {{"Content-Type", "application/x-www-form-urlencoded; charset=utf8"}});
  r.payload_sha256 = Sha256Hex(body.data(), body.size());
  CHECK(SignSuite(r).signature == "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe");
}

TEST_CASE("get-vanilla-with-session-token: the session token is sent and signed as x-amz-security-token") {
  SigV4Key key = SuiteKey();
  key.session_token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
  const SigV4Signed s = SignSuite(Suite("GET", "/"), key);
  CHECK(s.authorization == SuiteAuthorization("host;x-amz-date;x-amz-security-token",
                                              "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"));
  bool sent = false;
  for (const auto& [name, value] : s.added_headers) sent |= name == "x-amz-security-token" && value == key.session_token;
  CHECK(sent);
}

// The S3 API reference's examples: host examplebucket.s3.amazonaws.com, x-amz-content-sha256 signed.
SigV4Request S3Docs(std::string method, std::string path, std::vector<std::pair<std::string, std::string>> query = {}) {
  return {std::move(method), std::move(path), std::move(query), {{"Host", "examplebucket.s3.amazonaws.com"}},
          kEmptyPayloadSha256};
}

std::string S3DocsAuthorization(const std::string& signed_headers, const std::string& signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=" +
         signed_headers + ", Signature=" + signature;
}

TEST_CASE("S3 GET Object with a range: the S3 API reference's example") {
  SigV4Request r = S3Docs("GET", "/test.txt");
  r.headers.emplace_back("Range", "bytes=0-9");
  const SigV4Signed s = SignV4(r, S3DocsKey(), kS3DocsTime);
  CHECK(s.canonical_request ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  CHECK(s.authorization == S3DocsAuthorization("host;range;x-amz-content-sha256;x-amz-date",
                                               "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
}

TEST_CASE("S3 PUT Object: a '$' in the key is encoded and the payload's hash is signed") {
  const std::string body = "Welcome to Amazon S3.";
  SigV4Request r = S3Docs("PUT", "/test$file.text");
  r.headers.emplace_back("Date", "Fri, 24 May 2013 00:00:00 GMT");
  r.headers.emplace_back("x-amz-storage-class", "REDUCED_REDUNDANCY");
  r.payload_sha256 = Sha256Hex(body.data(), body.size());
  CHECK(r.payload_sha256 == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  const SigV4Signed s = SignV4(r, S3DocsKey(), kS3DocsTime);
  CHECK(s.encoded_path == "/test%24file.text");
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  CHECK(s.authorization == S3DocsAuthorization("date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                                               "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"));
}

TEST_CASE("S3 GET Bucket lifecycle: a parameter without a value is signed as name=") {
  const SigV4Signed s = SignV4(S3Docs("GET", "/", {{"lifecycle", ""}}), S3DocsKey(), kS3DocsTime);
  CHECK(s.canonical_query == "lifecycle=");
  CHECK(Sha256Hex(s.canonical_request.data(), s.canonical_request.size()) ==
        "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  CHECK(s.signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST_CASE("S3 GET Bucket, list objects with max-keys and prefix: the S3 API reference's example") {
  const SigV4Signed s = SignV4(S3Docs("GET", "/", {{"prefix", "J"}, {"max-keys", "2"}}), S3DocsKey(), kS3DocsTime);
  CHECK(s.canonical_query == "max-keys=2&prefix=J");
  CHECK(s.authorization == S3DocsAuthorization("host;x-amz-content-sha256;x-amz-date",
                                               "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"));
}

// Not from a published vector: S3's own rules where they differ from the other services'.
TEST_CASE("an S3 key's path is encoded once and never normalized") {
  SigV4Request r = S3Docs("GET", "/bucket/a//b/./c/../d e+f%");
  const SigV4Signed s = SignV4(r, S3DocsKey(), kS3DocsTime);
  CHECK(s.encoded_path == "/bucket/a//b/./c/../d%20e%2Bf%25");
  CHECK(UriEncode("a/b=c&d", false) == "a%2Fb%3Dc%26d");
}

TEST_CASE("the payload hash is sent as x-amz-content-sha256, UNSIGNED-PAYLOAD included") {
  SigV4Request r = S3Docs("PUT", "/k");
  r.payload_sha256 = kUnsignedPayload;
  const SigV4Signed s = SignV4(r, S3DocsKey(), kS3DocsTime);
  CHECK(s.canonical_request.find("\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n") != std::string::npos);
  CHECK(s.canonical_request.substr(s.canonical_request.size() - 17) == "\nUNSIGNED-PAYLOAD");
}

}  // namespace
}  // namespace kvstream
