// Helpers shared by the tests: deterministic payloads, temporary directories, feature probes,
// bandwidth units.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace kvstream::testing {

// Exit code ctest treats as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

// Bandwidths are in bytes per second: 300 * MBps.
inline constexpr double MBps = 1e6;

inline std::vector<uint8_t> Payload(size_t size, uint64_t seed) {
  std::vector<uint8_t> v(size);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t x = rng();
    for (size_t k = 0; k < 8 && i + k < size; ++k) v[i + k] = static_cast<uint8_t>(x >> (8 * k));
  }
  return v;
}

// A fresh directory removed at scope exit. Under $KVSTREAM_TEST_DIR, else the build tree's
// filesystem (not /tmp, which may be tmpfs without O_DIRECT).
class TempDir {
 public:
  explicit TempDir(const std::string& base = "") {
    std::string root = base;
    if (root.empty()) {
      const char* env = std::getenv("KVSTREAM_TEST_DIR");
      root = env ? env : std::filesystem::current_path().string();
    }
    std::string templ = root + "/kvstream-test-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvstream::testing
