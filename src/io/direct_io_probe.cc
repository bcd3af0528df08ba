#include "io/direct_io_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "format/chunk_format.h"
#include "io/safe_open.h"
#include "io/tier_device.h"

namespace kvstream {
namespace {

constexpr char kProbeName[] = ".kvstream-probe";

}  // namespace

absl::StatusOr<DirectIoSupport> ProbeDirectIoBeneath(int dir, const std::string& path) {
  DirectIoSupport out;
  const std::string probe = absl::StrCat(path, "/", kProbeName);
  // A fresh file, never a symlink's target (O_EXCL): a stale probe is removed first if regular.
  RemoveRegularFileBeneath(dir, kProbeName).IgnoreError();
  int fd = openat(dir, kProbeName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_DIRECT, 0640);
  if (fd < 0 && errno != EINVAL) return ErrnoStatus(errno, absl::StrCat("tier directory is not writable: cannot create ", probe));
  if (fd < 0) {
    out.buffered_reason = "the filesystem does not support O_DIRECT";
  } else {
    struct statx stx{};
    uint32_t mem_align = kFileAlignment, offset_align = kFileAlignment;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
        stx.stx_dio_mem_align != 0) {
      mem_align = std::max<uint32_t>(kFileAlignment, stx.stx_dio_mem_align);
      offset_align = std::max<uint32_t>(kFileAlignment, stx.stx_dio_offset_align);
    }
    if (mem_align > kFileAlignment || offset_align > kFileAlignment) {
      out.buffered_reason = absl::StrCat("O_DIRECT alignment ", std::max(mem_align, offset_align),
                                         " exceeds the chunk format's ", kFileAlignment);
    } else {
      void* page = std::aligned_alloc(kFileAlignment, kFileAlignment);
      std::memset(page, 0x5a, kFileAlignment);
      const bool ok = pwrite(fd, page, kFileAlignment, 0) == kFileAlignment &&
                      pread(fd, page, kFileAlignment, 0) == kFileAlignment;
      const int err = errno;
      std::free(page);
      if (ok) {
        out.direct_io = true;
        out.mem_alignment = mem_align;
        out.offset_alignment = offset_align;
      } else {
        out.buffered_reason = absl::StrCat("O_DIRECT probe failed: ", std::strerror(err));
      }
    }
    close(fd);
  }
  if (fd >= 0) unlinkat(dir, kProbeName, 0);
  return out;
}

}  // namespace kvstream
