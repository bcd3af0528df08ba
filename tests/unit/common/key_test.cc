// Keys: UTF-8 text of 1..1024 bytes without NUL, refused with a clear InvalidArgument otherwise.
#include "kvstream/key.h"

#include <catch2/catch.hpp>

#include <string>

namespace kvstream {
namespace {

TEST_CASE("text keys are accepted, including multibyte UTF-8") {
  CHECK(ValidateKey("model@tp0@0123abcd").ok());
  CHECK(ValidateKey("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80").ok());  // é € 😀
  CHECK(ValidateKey(std::string(kMaxKeyLength, 'k')).ok());
}

TEST_CASE("empty, too long, NUL and malformed UTF-8 keys are refused with the reason") {
  CHECK(absl::IsInvalidArgument(ValidateKey("")));
  CHECK(absl::IsInvalidArgument(ValidateKey(std::string(kMaxKeyLength + 1, 'k'))));
  CHECK(absl::IsInvalidArgument(ValidateKey(std::string("a\0b", 3))));
  for (const char* bad : {"\xff", "ab\xc3", "\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xf0\x8f\xbf\xbf", "ok\x80", "\xe2\x82"}) {
    INFO(bad);
    const absl::Status s = ValidateKey(bad);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find("UTF-8") != std::string::npos);
  }
}

TEST_CASE("a namespaced key names its namespace, any other key is in the namespace \"\"") {
  const std::string key = NamespacedKey("u1000", "model@tp0@0123");
  CHECK(key == "\x1du1000\x1dmodel@tp0@0123");
  CHECK(KeyNamespace(key) == "u1000");
  CHECK(KeyNamespace(NamespacedKey("u10", "\x1du1000\x1dk")) == "u10");  // the first namespace is the key's
  CHECK(KeyNamespace("model@tp0@0123").empty());
  CHECK(KeyNamespace("\x1dunclosed").empty());
  CHECK(KeyNamespace("").empty());
}

}  // namespace
}  // namespace kvstream
