#include "power_cut.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

namespace kvfaultfs {
namespace {

int Fail() { return -errno; }

// The directory holding `rel` ("." for a name in the root).
std::string Parent(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? std::string(".") : rel.substr(0, slash);
}

// pread/pwrite until done or an error; false on an error.
bool ReadFully(int fd, char* buf, size_t size, off_t offset, size_t* got) {
  *got = 0;
  while (*got < size) {
    const ssize_t n = pread(fd, buf + *got, size - *got, offset + static_cast<off_t>(*got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    *got += static_cast<size_t>(n);
  }
  return true;
}

bool WriteFully(int fd, const char* buf, size_t size, off_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, buf + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

PowerCut::PowerCut(int backing) : backing_(backing) {
  // Whatever an earlier run left in the graveyard was removed for good: the backing directory as
  // it is now is the medium.
  RemoveTree(kGraveyard);
  if (mkdirat(backing_, kGraveyard, 0700) != 0) {
    std::fprintf(stderr, "kvfaultfs: mkdir %s: %s\n", kGraveyard, std::strerror(errno));
  }
}

PowerCut::UnsyncedFile* PowerCut::TrackLocked(int fd, Inode* inode) {
  struct stat st;
  if (fstat(fd, &st) != 0) return nullptr;
  *inode = {st.st_dev, st.st_ino};
  auto it = files_.find(*inode);
  if (it != files_.end()) return &it->second;
  // A descriptor of our own, readable whatever the caller opened it for (as root).
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const int own = open(self.c_str(), O_RDWR | O_CLOEXEC);
  if (own < 0) return nullptr;
  UnsyncedFile& f = files_[*inode];
  f.fd = own;
  f.durable_size = st.st_size;
  return &f;
}

void PowerCut::SaveBlocksLocked(UnsyncedFile* f, off_t begin, off_t end) {
  end = std::min(end, f->durable_size);
  for (off_t b = begin / kBlock; b * kBlock < end; ++b) {
    if (f->durable_blocks.contains(b)) continue;
    std::vector<char> bytes(static_cast<size_t>(std::min(kBlock, f->durable_size - b * kBlock)));
    size_t got = 0;
    if (!ReadFully(f->fd, bytes.data(), bytes.size(), b * kBlock, &got)) ++restore_errors_;
    bytes.resize(got);
    f->durable_blocks.emplace(b, std::move(bytes));
  }
}

int PowerCut::Create(const std::string& rel, int flags, mode_t mode) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  struct stat st;
  const bool existed = fstatat(backing_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  const int fd = openat(backing_, rel.c_str(), (flags & ~O_TRUNC) | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return Fail();
  if (existed && (flags & O_TRUNC) != 0) {
    Inode inode;
    if (UnsyncedFile* f = TrackLocked(fd, &inode); f != nullptr) SaveBlocksLocked(f, 0, f->durable_size);
    if (ftruncate(fd, 0) != 0) {
      const int e = Fail();
      close(fd);
      return e;
    }
  }
  if (!existed) names_.push_back({NameChange::Kind::kCreated, rel, "", "", 0, {Parent(rel)}});
  return fd;
}

int PowerCut::Write(int fd, const void* buf, size_t size, off_t offset) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  Inode inode;
  UnsyncedFile* f = TrackLocked(fd, &inode);
  if (f == nullptr) return Fail();
  SaveBlocksLocked(f, offset, offset + static_cast<off_t>(size));
  const ssize_t n = pwrite(fd, buf, size, offset);
  if (n < 0) return Fail();
  last_write_ = {inode, offset, static_cast<size_t>(n), true};
  return static_cast<int>(n);
}

int PowerCut::Truncate(int fd, off_t size) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  Inode inode;
  UnsyncedFile* f = TrackLocked(fd, &inode);
  if (f == nullptr) return Fail();
  SaveBlocksLocked(f, size, f->durable_size);
  return ftruncate(fd, size) == 0 ? 0 : Fail();
}

int PowerCut::Fsync(int fd, bool) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  struct stat st;
  if (fstat(fd, &st) != 0) return Fail();
  const Inode inode{st.st_dev, st.st_ino};
  // The medium is the backing directory once the power is cut: no need to sync it for real.
  if (auto it = files_.find(inode); it != files_.end()) {
    close(it->second.fd);
    files_.erase(it);
  }
  if (last_write_.valid && last_write_.inode == inode) last_write_.valid = false;
  return 0;
}

int PowerCut::FsyncDir(const std::string& rel) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  for (NameChange& c : names_) c.unsynced_dirs.erase(rel);
  for (NameChange& c : names_) {
    if (c.unsynced_dirs.empty()) ForgetLocked(c);
  }
  std::erase_if(names_, [](const NameChange& c) { return c.unsynced_dirs.empty(); });
  return 0;
}

int PowerCut::Mkdir(const std::string& rel, mode_t mode) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  if (mkdirat(backing_, rel.c_str(), mode) != 0) return Fail();
  names_.push_back({NameChange::Kind::kMadeDir, rel, "", "", 0, {Parent(rel)}});
  return 0;
}

std::string PowerCut::NewGraveLocked() { return std::string(kGraveyard) + "/" + std::to_string(++graves_); }

int PowerCut::Unlink(const std::string& rel) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  struct stat st;
  if (fstatat(backing_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Fail();
  if (S_ISDIR(st.st_mode)) return -EISDIR;
  // Not removed yet: kept where a cut can bring it back from until the removal is durable.
  const std::string grave = NewGraveLocked();
  if (renameat(backing_, rel.c_str(), backing_, grave.c_str()) != 0) return Fail();
  names_.push_back({NameChange::Kind::kUnlinked, rel, "", grave, 0, {Parent(rel)}});
  return 0;
}

int PowerCut::Rmdir(const std::string& rel) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  struct stat st;
  if (fstatat(backing_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Fail();
  if (unlinkat(backing_, rel.c_str(), AT_REMOVEDIR) != 0) return Fail();
  names_.push_back({NameChange::Kind::kRemovedDir, rel, "", "", st.st_mode & 07777, {Parent(rel)}});
  return 0;
}

int PowerCut::Rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  struct stat st;
  std::string grave;
  if (fstatat(backing_, to.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
    grave = NewGraveLocked();  // the file replaced waits there until the rename is durable
    if (renameat(backing_, to.c_str(), backing_, grave.c_str()) != 0) return Fail();
  }
  if (renameat(backing_, from.c_str(), backing_, to.c_str()) != 0) {
    const int e = Fail();
    if (!grave.empty()) renameat(backing_, grave.c_str(), backing_, to.c_str());
    return e;
  }
  names_.push_back({NameChange::Kind::kRenamed, to, from, grave, 0, {Parent(from), Parent(to)}});
  return 0;
}

int PowerCut::Link(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  if (off_) return -EIO;
  if (linkat(backing_, from.c_str(), backing_, to.c_str(), 0) != 0) return Fail();
  names_.push_back({NameChange::Kind::kCreated, to, "", "", 0, {Parent(to)}});
  return 0;
}

void PowerCut::ForgetLocked(NameChange& change) {
  if (!change.grave.empty() && unlinkat(backing_, change.grave.c_str(), 0) != 0) ++restore_errors_;
  change.grave.clear();
}

void PowerCut::UndoLocked(const NameChange& c) {
  using Kind = NameChange::Kind;
  bool ok = true;
  switch (c.kind) {
    case Kind::kCreated:
      ok = unlinkat(backing_, c.path.c_str(), 0) == 0 || errno == ENOENT;
      break;
    case Kind::kMadeDir:  // its name never reached the medium: nothing below it did either
      RemoveTree(c.path);
      break;
    case Kind::kUnlinked:
      ok = renameat(backing_, c.grave.c_str(), backing_, c.path.c_str()) == 0;
      break;
    case Kind::kRemovedDir:
      ok = mkdirat(backing_, c.path.c_str(), c.mode) == 0;
      break;
    case Kind::kRenamed:
      ok = renameat(backing_, c.path.c_str(), backing_, c.from.c_str()) == 0;
      if (!c.grave.empty()) ok &= renameat(backing_, c.grave.c_str(), backing_, c.path.c_str()) == 0;
      break;
  }
  if (!ok) {
    ++restore_errors_;
    std::fprintf(stderr, "kvfaultfs: power cut: could not undo a change of %s: %s\n", c.path.c_str(),
                 std::strerror(errno));
  }
}

void PowerCut::CutLocked(bool tear, uint64_t seed) {
  // The last unsynced write, as it is now: some of its blocks reach the medium.
  std::vector<char> torn;
  const UnsyncedFile* torn_file = nullptr;
  if (tear && last_write_.valid) {
    if (auto it = files_.find(last_write_.inode); it != files_.end()) {
      torn.resize(last_write_.size);
      size_t got = 0;
      if (ReadFully(it->second.fd, torn.data(), torn.size(), last_write_.offset, &got)) {
        torn.resize(got);
        torn_file = &it->second;
      }
    }
  }
  for (auto& [inode, f] : files_) {
    bool ok = ftruncate(f.fd, f.durable_size) == 0;
    for (const auto& [block, bytes] : f.durable_blocks) ok &= WriteFully(f.fd, bytes.data(), bytes.size(), block * kBlock);
    if (&f == torn_file) {
      std::mt19937_64 rng(seed);
      // Pieces of the write cut at block boundaries, each landed or not.
      for (off_t at = last_write_.offset; at < last_write_.offset + static_cast<off_t>(torn.size());) {
        const off_t end = std::min((at / kBlock + 1) * kBlock, last_write_.offset + static_cast<off_t>(torn.size()));
        if (rng() % 2 == 0) {
          ok &= WriteFully(f.fd, torn.data() + (at - last_write_.offset), static_cast<size_t>(end - at), at);
          ++torn_blocks_kept_;
        }
        at = end;
      }
    }
    if (!ok) ++restore_errors_;
    close(f.fd);
  }
  files_.clear();
  for (auto it = names_.rbegin(); it != names_.rend(); ++it) UndoLocked(*it);
  names_.clear();
  last_write_.valid = false;
  off_ = true;
  ++cuts_;
}

void PowerCut::SyncLocked() {
  for (auto& [inode, f] : files_) close(f.fd);
  files_.clear();
  for (NameChange& c : names_) ForgetLocked(c);
  names_.clear();
  last_write_.valid = false;
  ++syncs_;
}

bool PowerCut::Command(const std::string& line) {
  std::istringstream words(line);
  std::string verb, option;
  words >> verb;
  std::lock_guard lock(mu_);
  if (verb == "cut") {
    uint64_t seed = 0;
    const bool tear = static_cast<bool>(words >> option);
    if (tear && (option != "tear" || !(words >> seed))) return false;
    if (!off_) CutLocked(tear, seed);
    return true;
  }
  if (verb == "sync") {
    if (!off_) SyncLocked();
    return true;
  }
  if (verb == "on") {
    off_ = false;
    return true;
  }
  return false;
}

std::string PowerCut::Status() const {
  std::lock_guard lock(mu_);
  std::ostringstream out;
  out << "power " << (off_ ? "off" : "on") << "\ncuts " << cuts_ << "\nsyncs " << syncs_ << "\nunsynced_files "
      << files_.size() << "\nunsynced_names " << names_.size() << "\ntorn_blocks_kept " << torn_blocks_kept_
      << "\nrestore_errors " << restore_errors_ << "\n";
  return out.str();
}

void PowerCut::RemoveTree(const std::string& rel) {
  const int fd = openat(backing_, rel.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    unlinkat(backing_, rel.c_str(), 0);
    return;
  }
  std::vector<std::string> names;
  if (DIR* dir = fdopendir(fd); dir != nullptr) {
    while (dirent* e = readdir(dir)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    }
    closedir(dir);
  } else {
    close(fd);
  }
  for (const std::string& name : names) {
    const std::string child = rel + "/" + name;
    if (unlinkat(backing_, child.c_str(), 0) != 0) RemoveTree(child);
  }
  unlinkat(backing_, rel.c_str(), AT_REMOVEDIR);
}

}  // namespace kvfaultfs
