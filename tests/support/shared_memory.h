// Shared memory a test maps as a client would: an unsealed memfd, a memfd sealed against
// resizing, or an unsealed /dev/shm file (as SGLang's host pool). Unmapped and closed at scope
// exit; a setup failure throws (the test fails with the reason).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace kvstream::testing {

class MappedSharedMemory {
 public:
  enum class Kind { kMemfd, kSealedMemfd, kShmFile };

  explicit MappedSharedMemory(size_t size, Kind kind = Kind::kMemfd) : size_(size) {
    if (kind == Kind::kShmFile) {
      const std::string path = "/dev/shm/kvstream-test-" + std::to_string(getpid()) + "-" + std::to_string(Next());
      fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd_ >= 0) unlink(path.c_str());
    } else {
      fd_ = memfd_create("kvstream-test", MFD_CLOEXEC | (kind == Kind::kSealedMemfd ? MFD_ALLOW_SEALING : 0));
    }
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size)) != 0 ||
        (kind == Kind::kSealedMemfd && fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)) {
      Fail("creating");
    }
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (data == MAP_FAILED) Fail("mapping");
    data_ = static_cast<uint8_t*>(data);
  }
  ~MappedSharedMemory() {
    if (data_ != nullptr) munmap(data_, size_);
    if (fd_ >= 0) close(fd_);
  }
  MappedSharedMemory(const MappedSharedMemory&) = delete;
  MappedSharedMemory& operator=(const MappedSharedMemory&) = delete;

  int fd() const { return fd_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  static int Next() {
    static int n = 0;
    return n++;
  }
  [[noreturn]] void Fail(const char* what) {
    const std::string why = std::string(what) + " shared memory: " + std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error(why);
  }

  size_t size_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

// Descriptors of this process that are the memfd named `name` (a probe a test hands over, to see
// that the other side closed its copy).
inline int OpenMemfds(const std::string& name) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(e.path(), ec).string().find("memfd:" + name) == 0;
  }
  return n;
}

}  // namespace kvstream::testing
