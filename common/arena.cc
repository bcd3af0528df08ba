#include "arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvstream {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(what + ": " + std::strerror(errno));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Arena>> Arena::MapShared(int fd, uint64_t size) {
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const absl::Status s = Errno("mmap arena");
    close(fd);
    return s;
  }
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<uint8_t*>(base), size));
}

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(const std::string& name, uint64_t size) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (size == 0 || size % page != 0) {
    return absl::InvalidArgumentError("arena size " + std::to_string(size) + " must be a positive multiple of " +
                                      std::to_string(page));
  }
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const absl::Status s = errno == ENOMEM || errno == ENOSPC
                               ? absl::ResourceExhaustedError("cannot size arena: " + std::string(std::strerror(errno)))
                               : Errno("ftruncate arena");
    close(fd);
    return s;
  }
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    const absl::Status s = Errno("sealing arena");
    close(fd);
    return s;
  }
  return MapShared(fd, size);
}

absl::StatusOr<std::unique_ptr<Arena>> Arena::Map(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    close(fd);
    return absl::FailedPreconditionError("arena descriptor is not a size-sealed memfd");
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError("arena descriptor has no size");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  return MapShared(fd, size);
}

Arena::~Arena() {
  munmap(base_, size_);
  close(fd_);
}

absl::Status Arena::CheckRange(uint64_t offset, uint64_t length) const {
  return CheckRangeWithin(offset, length, size_, "the session arena");
}

absl::Status CheckRangeWithin(uint64_t offset, uint64_t length, uint64_t size, const std::string& what) {
  if (length == 0 || offset > size || length > size - offset) {
    return absl::OutOfRangeError("range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                 ") is outside " + what + " of " + std::to_string(size) + " bytes");
  }
  return absl::OkStatus();
}

absl::Status SendFd(int socket, int fd) {
  const char byte = 'F';
  if (!SendWithDescriptor(socket, &byte, 1, fd)) return Errno("sending arena descriptor");
  return absl::OkStatus();
}

bool SendWithDescriptor(int socket, const void* data, size_t size, int fd) {
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(size);
}

absl::StatusOr<int> ReceiveFd(int socket) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("receiving arena descriptor");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (n != 1 || c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
      c->cmsg_len != CMSG_LEN(sizeof(int))) {
    return absl::DataLossError("no descriptor in the message");
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace kvstream
