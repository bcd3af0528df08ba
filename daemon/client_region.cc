#include "client_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "arena.h"

namespace kvstream {
namespace {

absl::Status Refuse(int fd, absl::Status status) {
  close(fd);
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClientRegion>> ClientRegion::Adopt(int fd, uint64_t size) {
  if (size == 0) return Refuse(fd, absl::InvalidArgumentError("a region needs a size"));
  struct stat st;
  struct statfs fs;
  if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0) {
    return Refuse(fd, absl::InvalidArgumentError(absl::StrCat("cannot examine the region's descriptor: ",
                                                              std::strerror(errno))));
  }
  if (!S_ISREG(st.st_mode) || (fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC)) {
    return Refuse(fd, absl::InvalidArgumentError(
                          "a region must be a shared-memory file (memfd, /dev/shm or hugetlbfs), not this descriptor"));
  }
  if ((fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) {
    return Refuse(fd, absl::InvalidArgumentError("the region's descriptor must be open read-write"));
  }
  if (static_cast<uint64_t>(st.st_size) < size) {
    return Refuse(fd, absl::InvalidArgumentError(
                          absl::StrCat("the region's file has ", st.st_size, " bytes, less than the ", size, " asked")));
  }
  const int seals = fcntl(fd, F_GET_SEALS);  // EINVAL for files that cannot be sealed: none
  if (seals > 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return Refuse(fd, absl::FailedPreconditionError("the region is sealed against writes: nothing can be read into it"));
  }
  // Whole pages of the file (huge pages on hugetlbfs): the kernel maps no less, and unmaps a
  // hugetlbfs mapping only whole. Within the file, whose size is a multiple of them there.
  const uint64_t page = st.st_blksize > 0 ? static_cast<uint64_t>(st.st_blksize) : 4096;
  const uint64_t mapped = size + (page - size % page) % page;
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return Refuse(fd, absl::ResourceExhaustedError(absl::StrCat("cannot map the region: ", std::strerror(errno))));
  }
  // The one rule (client_region.h): direct only where no page can vanish for good.
  const bool direct = fs.f_type == TMPFS_MAGIC && seals > 0 && (seals & F_SEAL_SHRINK) != 0;
  return std::unique_ptr<ClientRegion>(new ClientRegion(fd, static_cast<uint8_t*>(base), size, mapped, direct));
}

ClientRegion::~ClientRegion() {
  munmap(base_, mapped_);
  close(fd_);
}

absl::Status ClientRegion::CheckRange(uint64_t offset, uint64_t length) const {
  return CheckRangeWithin(offset, length, size_, "the client region");
}

}  // namespace kvstream
