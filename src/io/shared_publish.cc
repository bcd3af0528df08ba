#include "io/shared_publish.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "format/chunk_format.h"
#include "io/chunk_files.h"  // InTier
#include "io/safe_open.h"
#include "io/tier_device.h"

namespace kvstream {

absl::Status PublishChunk(const SharedDirectories& dirs, const std::string& stem, bool remove_on_error) {
  const std::string rel = RelativeChunkPath(stem);
  const std::string dir = stem.substr(0, 2);
  if (mkdirat(dirs.root, dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("mkdir ", dirs.root_path, "/", dir));
  }
  // Both directories opened without following a symlink: a fan-out directory another writer
  // replaced by a link to elsewhere never receives this node's chunks.
  absl::StatusOr<int> published = OpenDirectoryBeneath(dirs.root, dir);
  absl::StatusOr<int> own = OpenDirectoryBeneath(dirs.own, dir);
  const std::string name = rel.substr(3);
  absl::Status status;
  if (!published.ok() || !own.ok()) {
    status = InTier(dirs.root_path, !published.ok() ? published.status() : own.status());
    if (remove_on_error && own.ok()) unlinkat(*own, name.c_str(), 0);
  } else if (linkat(*own, name.c_str(), *published, name.c_str(), 0) != 0) {
    const int err = errno;
    const std::string path = absl::StrCat(dirs.root_path, "/", rel);
    if (err == EEXIST && OwnIsPublished(dirs.root, dirs.own, rel)) {
      // published already (a restart's scan)
    } else if (err == EEXIST) {  // another node published the key first: its file stands
      unlinkat(*own, name.c_str(), 0);
      status = absl::AlreadyExistsError(absl::StrCat("another node published ", path, " first"));
    } else {
      if (remove_on_error) unlinkat(*own, name.c_str(), 0);
      status = ErrnoStatus(err, absl::StrCat("link ", path));
    }
  }
  if (published.ok()) close(*published);
  if (own.ok()) close(*own);
  return status;
}

bool OwnIsPublished(int root, int own, const std::string& rel) {
  absl::StatusOr<struct stat> mine = StatBeneath(own, rel), published = StatBeneath(root, rel);
  return mine.ok() && published.ok() && S_ISREG(mine->st_mode) && SameFile(*mine, *published);
}

absl::Status UnpublishChunk(const SharedDirectories& dirs, const std::string& stem) {
  const std::string rel = RelativeChunkPath(stem);
  // Only the owner changes its published name, so the file cannot change between stat and unlink.
  if (!OwnIsPublished(dirs.root, dirs.own, rel)) return absl::OkStatus();
  const absl::Status s = RemoveRegularFileBeneath(dirs.root, rel);
  return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : InTier(dirs.root_path, s);
}

absl::Status RemoveOwnChunk(const SharedDirectories& dirs, const std::string& stem) {
  if (absl::Status s = UnpublishChunk(dirs, stem); !s.ok()) return s;
  const absl::Status s = RemoveRegularFileBeneath(dirs.own, RelativeChunkPath(stem));
  return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : InTier(dirs.own_path, s);
}

}  // namespace kvstream
