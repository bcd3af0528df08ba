#include "kvstream/key.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace kvstream {
namespace {

constexpr char kNamespaceMark = '\x1d';  // ASCII group separator: opens and closes a key's namespace

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence (no overlong
// forms, no surrogates, nothing above U+10FFFF), or npos.
size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += n + 1;
  }
  return std::string_view::npos;
}

}  // namespace

absl::Status ValidateKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (key.size() > kMaxKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("key is ", key.size(), " bytes; the limit is ", kMaxKeyLength));
  }
  if (key.find('\0') != std::string_view::npos) return absl::InvalidArgumentError("key contains NUL");
  if (const size_t bad = FirstInvalidUtf8(key); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("key is not UTF-8 text (byte ", bad, ")"));
  }
  return absl::OkStatus();
}

std::string NamespacedKey(std::string_view ns, std::string_view key) {
  std::string out;
  out.reserve(ns.size() + key.size() + 2);
  out += kNamespaceMark;
  out += ns;
  out += kNamespaceMark;
  out += key;
  return out;
}

std::string_view KeyNamespace(std::string_view key) {
  if (key.empty() || key[0] != kNamespaceMark) return {};
  const size_t end = key.find(kNamespaceMark, 1);
  return end == std::string_view::npos ? std::string_view() : key.substr(1, end - 1);
}

}  // namespace kvstream
