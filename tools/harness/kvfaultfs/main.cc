// kvfaultfs: a passthrough FUSE file system over a backing directory that injects faults into
// chosen operations on chosen files, for testing kvstreamd against a real tier that fails: I/O
// errors, a full disk, latency, and hangs (a read that does not answer until released).
//
// Faults come from a rules file (--rules), re-read whenever it changes, one rule per line:
//   OP GLOB FAULT [MS]
//     OP    read | write | open | create | fsync | any
//     GLOB  fnmatch(3) pattern on the path inside the file system ("/ab/abcd.kvc", or "*")
//     FAULT eio | enospc | delay MS | hang | rate MBPS
// The first matching rule applies. `hang` blocks the operation until no hang rule matches it any
// more (edit the rules file to release it); `delay` sleeps before doing the operation for real;
// `rate` (read or write only) serves the operations it matches one after another, each taking its
// bytes / MBPS (the backing file's own copy done within that time), as one device queue would:
// reads and writes are two queues, and idle time earns no credit (unlike the blkio throttle, which
// lets a tier that idled read ahead of its cap).
// '#' starts a comment. Every operation not matched passes through to the backing directory.
//
// Power cuts (--power-cut; power_cut.h): the file system remembers what is not durable yet (data
// not followed by fsync/fdatasync of its file; creates, mkdirs, links, unlinks, rmdirs and renames
// not followed by an fsync of their directory) and a power cut takes it back out of the backing
// directory. It is driven through the control file /.kvfaultfs-power at the mount's root (not
// listed; reading it tells the power state and counts), one command per write:
//   cut            the power fails: what is not durable is dropped, every other operation then
//                  fails with EIO until `on`
//   cut tear SEED  the same, and the last unsynced write is torn: each of its 4 KiB blocks reached
//                  the medium or not (drawn from SEED)
//   sync           a sync point, as sync(2): everything written so far is durable
//   on             the power is back (start the daemon again on what is left)
// Kill the processes using the mount before `on` (a power loss kills them too). fsync and
// fdatasync only mark data durable here: the backing directory itself is not synced.
// O_DIRECT: every file is opened with direct_io, so every read and write reaches kvfaultfs.
//
// Usage: kvfaultfs --backing DIR --rules FILE [--power-cut] MOUNTPOINT [-f] [-o opt...]
//        (fusermount3 -u to stop)
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <fuse.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "power_cut.h"

namespace {

enum class Fault { kEio, kEnospc, kDelay, kHang, kRate };

struct Rule {
  std::string op;
  std::string glob;
  Fault fault = Fault::kEio;
  int ms = 0;
  double mbps = 0;  // kRate
};

using Clock = std::chrono::steady_clock;

// One device queue served at a rate: an operation starts when the one before it is done, or now
// when the queue is empty, and takes its bytes / rate.
class Pacer {
 public:
  // When `bytes`, queued now, will have been transferred at `mbps` MB/s.
  Clock::time_point Reserve(size_t bytes, double mbps) {
    std::lock_guard lock(mu_);
    const Clock::time_point start = std::max(Clock::now(), next_free_);
    next_free_ = start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(static_cast<double>(bytes) / (mbps * 1e6)));
    return next_free_;
  }

 private:
  std::mutex mu_;
  Clock::time_point next_free_;  // guarded by mu_
};

struct State {
  int backing = -1;  // the backing directory
  std::string rules_path;
  std::mutex mu;
  std::vector<Rule> rules;  // guarded by mu
  struct stat rules_stat{};  // guarded by mu: the rules file as last read (a rewrite is a new inode)
  Pacer read_queue;
  Pacer write_queue;
  std::unique_ptr<kvfaultfs::PowerCut> power;  // --power-cut
};

constexpr const char* kControlPath = "/.kvfaultfs-power";
constexpr uint64_t kControlHandle = ~uint64_t{0};

State& S() {
  static State s;
  return s;
}

std::vector<Rule> ParseRules(const std::string& path) {
  std::vector<Rule> rules;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    Rule r;
    std::string fault;
    if (!(words >> r.op >> r.glob >> fault)) continue;
    if (fault == "eio") {
      r.fault = Fault::kEio;
    } else if (fault == "enospc") {
      r.fault = Fault::kEnospc;
    } else if (fault == "hang") {
      r.fault = Fault::kHang;
    } else if (fault == "delay" && (words >> r.ms)) {
      r.fault = Fault::kDelay;
    } else if (fault == "rate" && (r.op == "read" || r.op == "write") && (words >> r.mbps) && r.mbps > 0) {
      r.fault = Fault::kRate;
    } else {
      std::fprintf(stderr, "kvfaultfs: ignoring rule '%s'\n", line.c_str());
      continue;
    }
    rules.push_back(r);
  }
  return rules;
}

// The rule for `op` on `path` in force now (the rules file is re-read when its mtime changes).
std::optional<Rule> Match(const char* op, const char* path) {
  State& s = S();
  std::lock_guard lock(s.mu);
  struct stat st;
  if (stat(s.rules_path.c_str(), &st) == 0) {
    const struct stat& was = s.rules_stat;
    if (st.st_ino != was.st_ino || st.st_size != was.st_size || st.st_mtim.tv_sec != was.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != was.st_mtim.tv_nsec) {
      s.rules = ParseRules(s.rules_path);
      s.rules_stat = st;
    }
  } else {
    s.rules.clear();
    s.rules_stat = {};
  }
  for (const Rule& r : s.rules) {
    if ((r.op == op || r.op == "any") && fnmatch(r.glob.c_str(), path, 0) == 0) return r;
  }
  return std::nullopt;
}

// 0 to go on with the operation, or the negative errno to fail it with. An operation of `bytes`
// that a rate rule paces gets in `done_at` the time to answer it at (done_at is required then).
int Inject(const char* op, const char* path, size_t bytes = 0, std::optional<Clock::time_point>* done_at = nullptr) {
  for (;;) {
    const std::optional<Rule> r = Match(op, path);
    if (!r) return 0;
    switch (r->fault) {
      case Fault::kEio:
        return -EIO;
      case Fault::kEnospc:
        return -ENOSPC;
      case Fault::kDelay:
        std::this_thread::sleep_for(std::chrono::milliseconds(r->ms));
        return 0;
      case Fault::kHang:
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // until the rule goes
        break;
      case Fault::kRate:
        *done_at = (r->op == "read" ? S().read_queue : S().write_queue).Reserve(bytes, r->mbps);
        return 0;
    }
  }
}

// The path relative to the backing directory ("." for the root).
std::string Rel(const char* path) { return path[1] == '\0' ? std::string(".") : std::string(path + 1); }
int Fail() { return -errno; }

bool IsControl(const char* path) { return S().power != nullptr && std::strcmp(path, kControlPath) == 0; }

// 0 to go on: -ENOENT for the power-cut graveyard (hidden), -EIO while the power is off.
int Gate(const char* path) {
  const kvfaultfs::PowerCut* power = S().power.get();
  if (power == nullptr) return 0;
  const std::string graveyard = std::string("/") + kvfaultfs::PowerCut::kGraveyard;
  if (std::strncmp(path, graveyard.c_str(), graveyard.size()) == 0 &&
      (path[graveyard.size()] == '\0' || path[graveyard.size()] == '/')) {
    return -ENOENT;
  }
  return power->off() ? -EIO : 0;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  if (IsControl(path)) {
    *st = {};
    st->st_mode = S_IFREG | 0600;
    st->st_nlink = 1;
    return 0;
  }
  if (int e = Gate(path); e != 0) return e;
  if (fi != nullptr) return fstat(static_cast<int>(fi->fh), st) == 0 ? 0 : Fail();
  return fstatat(S().backing, Rel(path).c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : Fail();
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  if (int e = Gate(path); e != 0) return e;
  const bool root = std::strcmp(path, "/") == 0;
  const int fd = openat(S().backing, Rel(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail();
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    return Fail();
  }
  while (dirent* e = readdir(dir)) {
    if (root && S().power != nullptr && std::strcmp(e->d_name, kvfaultfs::PowerCut::kGraveyard) == 0) continue;
    fill(buf, e->d_name, nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  }
  closedir(dir);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if (IsControl(path)) {
    fi->fh = kControlHandle;
    fi->direct_io = 1;
    return 0;
  }
  if (int e = Gate(path); e != 0) return e;
  if (int e = Inject("open", path); e != 0) return e;
  if (S().power != nullptr && (fi->flags & O_TRUNC) != 0) {  // the truncation is a change a cut undoes
    const int fd = openat(S().backing, Rel(path).c_str(), (fi->flags & ~(O_DIRECT | O_TRUNC)) | O_CLOEXEC);
    if (fd < 0) return Fail();
    if (const int e = S().power->Truncate(fd, 0); e != 0) {
      close(fd);
      return e;
    }
    fi->fh = static_cast<uint64_t>(fd);
    fi->direct_io = 1;
    return 0;
  }
  // O_DIRECT is the kernel's business between it and this process: the backing file is opened
  // without it, and direct_io makes every read and write reach this file system (no page cache).
  const int fd = openat(S().backing, Rel(path).c_str(), (fi->flags & ~O_DIRECT) | O_CLOEXEC);
  if (fd < 0) return Fail();
  fi->fh = static_cast<uint64_t>(fd);
  fi->direct_io = 1;
  return 0;
}

int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  if (int e = Gate(path); e != 0) return e;
  if (int e = Inject("create", path); e != 0) return e;
  if (S().power != nullptr) {
    const int fd = S().power->Create(Rel(path), fi->flags & ~O_DIRECT, mode);
    if (fd < 0) return fd;
    fi->fh = static_cast<uint64_t>(fd);
    fi->direct_io = 1;
    return 0;
  }
  const int fd = openat(S().backing, Rel(path).c_str(), (fi->flags & ~O_DIRECT) | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return Fail();
  fi->fh = static_cast<uint64_t>(fd);
  fi->direct_io = 1;
  return 0;
}

int Read(const char* path, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  if (fi->fh == kControlHandle) {
    const std::string status = S().power->Status();
    if (offset >= static_cast<off_t>(status.size())) return 0;
    const size_t n = std::min(size, status.size() - static_cast<size_t>(offset));
    std::memcpy(buf, status.data() + offset, n);
    return static_cast<int>(n);
  }
  if (int e = Gate(path); e != 0) return e;
  std::optional<Clock::time_point> done_at;
  if (int e = Inject("read", path, size, &done_at); e != 0) return e;
  const ssize_t n = pread(static_cast<int>(fi->fh), buf, size, offset);
  const int result = n < 0 ? Fail() : static_cast<int>(n);
  if (done_at) std::this_thread::sleep_until(*done_at);
  return result;
}

int Write(const char* path, const char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  if (fi->fh == kControlHandle) return S().power->Command(std::string(buf, size)) ? static_cast<int>(size) : -EINVAL;
  if (int e = Gate(path); e != 0) return e;
  std::optional<Clock::time_point> done_at;
  if (int e = Inject("write", path, size, &done_at); e != 0) return e;
  const int fd = static_cast<int>(fi->fh);
  const ssize_t n = S().power != nullptr ? S().power->Write(fd, buf, size, offset) : pwrite(fd, buf, size, offset);
  const int result = n < 0 ? (S().power != nullptr ? static_cast<int>(n) : Fail()) : static_cast<int>(n);
  // Start writing the backing pages out now, so the backing file system's writeback runs with
  // the writes rather than in bursts later, in the middle of other operations (best effort).
  if (n > 0) sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE);
  if (done_at) std::this_thread::sleep_until(*done_at);
  return result;
}

int Release(const char*, fuse_file_info* fi) {
  if (fi->fh == kControlHandle) return 0;
  close(static_cast<int>(fi->fh));
  return 0;
}

int Fsync(const char* path, int datasync, fuse_file_info* fi) {
  if (fi->fh == kControlHandle) return 0;
  if (int e = Gate(path); e != 0) return e;
  if (int e = Inject("fsync", path); e != 0) return e;
  const int fd = static_cast<int>(fi->fh);
  if (S().power != nullptr) return S().power->Fsync(fd, datasync != 0);
  return (datasync ? fdatasync(fd) : fsync(fd)) == 0 ? 0 : Fail();
}

int Mkdir(const char* path, mode_t mode) {
  if (int e = Gate(path); e != 0) return e;
  if (S().power != nullptr) return S().power->Mkdir(Rel(path), mode);
  return mkdirat(S().backing, Rel(path).c_str(), mode) == 0 ? 0 : Fail();
}
int Unlink(const char* path) {
  if (int e = Gate(path); e != 0) return e;
  if (S().power != nullptr) return S().power->Unlink(Rel(path));
  return unlinkat(S().backing, Rel(path).c_str(), 0) == 0 ? 0 : Fail();
}
int Rmdir(const char* path) {
  if (int e = Gate(path); e != 0) return e;
  if (S().power != nullptr) return S().power->Rmdir(Rel(path));
  return unlinkat(S().backing, Rel(path).c_str(), AT_REMOVEDIR) == 0 ? 0 : Fail();
}

int Rename(const char* from, const char* to, unsigned int flags) {
  if (flags != 0) return -EINVAL;
  if (int e = Gate(from); e != 0) return e;
  if (int e = Gate(to); e != 0) return e;
  if (S().power != nullptr) return S().power->Rename(Rel(from), Rel(to));
  return renameat(S().backing, Rel(from).c_str(), S().backing, Rel(to).c_str()) == 0 ? 0 : Fail();
}

int Link(const char* from, const char* to) {
  if (int e = Gate(from); e != 0) return e;
  if (int e = Gate(to); e != 0) return e;
  if (S().power != nullptr) return S().power->Link(Rel(from), Rel(to));
  return linkat(S().backing, Rel(from).c_str(), S().backing, Rel(to).c_str(), 0) == 0 ? 0 : Fail();
}

int TruncateFd(int fd, off_t size) {
  if (S().power != nullptr) return S().power->Truncate(fd, size);
  return ftruncate(fd, size) == 0 ? 0 : Fail();
}

int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  if (IsControl(path)) return 0;  // `echo cut >` truncates it first
  if (int e = Gate(path); e != 0) return e;
  if (fi != nullptr) return TruncateFd(static_cast<int>(fi->fh), size);
  const int fd = openat(S().backing, Rel(path).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Fail();
  const int r = TruncateFd(fd, size);
  close(fd);
  return r;
}

int Chmod(const char* path, mode_t mode, fuse_file_info*) {
  if (int e = Gate(path); e != 0) return e;
  return fchmodat(S().backing, Rel(path).c_str(), mode, 0) == 0 ? 0 : Fail();
}

int Utimens(const char* path, const timespec tv[2], fuse_file_info*) {
  if (IsControl(path)) return 0;
  if (int e = Gate(path); e != 0) return e;
  return utimensat(S().backing, Rel(path).c_str(), tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : Fail();
}

int StatFs(const char*, struct statvfs* st) { return fstatvfs(S().backing, st) == 0 ? 0 : Fail(); }

int Flock(const char* path, fuse_file_info* fi, int op) {
  if (int e = Gate(path); e != 0) return e;
  return flock(static_cast<int>(fi->fh), op) == 0 ? 0 : Fail();
}

int FsyncDir(const char* path, int, fuse_file_info*) {
  if (int e = Gate(path); e != 0) return e;
  return S().power != nullptr ? S().power->FsyncDir(Rel(path)) : 0;
}
int OpenDir(const char*, fuse_file_info*) { return 0; }

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  conn->max_write = 1 << 20;  // requests of up to 1 MiB, reads too (the kernel's default is 128 KiB)
  // Requests a rate rule holds back must not hold up others in the kernel's queue (12 by default):
  // reads queue behind slow writes on no real device.
  conn->max_background = 256;
  conn->congestion_threshold = 192;
  cfg->use_ino = 1;  // the backing inode numbers: hard links (a shared tier's published chunks) are one file
  cfg->entry_timeout = 0;  // every lookup reaches here: files renamed in the backing dir are seen
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  return nullptr;
}

struct Options {
  const char* backing = nullptr;
  const char* rules = nullptr;
  int power_cut = 0;
};

const fuse_opt kOptions[] = {{"--backing=%s", offsetof(Options, backing), 0},
                             {"--rules=%s", offsetof(Options, rules), 0},
                             {"--power-cut", offsetof(Options, power_cut), 1},
                             FUSE_OPT_END};

}  // namespace

int main(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  Options o;
  if (fuse_opt_parse(&args, &o, kOptions, nullptr) != 0) return 2;
  if (o.backing == nullptr || o.rules == nullptr) {
    std::fprintf(stderr,
                 "usage: kvfaultfs --backing=DIR --rules=FILE [--power-cut] MOUNTPOINT [-f] [-o opt...]\n"
                 "  rules: lines of OP GLOB FAULT [MS]; OP read|write|open|create|fsync|any;\n"
                 "  FAULT eio|enospc|delay MS|hang (until the rule is removed)|rate MBPS (read, write:\n"
                 "  one queue each, served at MBPS MB/s); first match applies\n"
                 "  --power-cut: remember what is not durable (data not fsynced, names whose directory\n"
                 "  is not fsynced); write to MOUNTPOINT/.kvfaultfs-power: 'cut' (drop it all, then\n"
                 "  every operation fails with EIO), 'cut tear SEED' (and tear the last unsynced write\n"
                 "  at 4 KiB blocks), 'sync' (all durable now), 'on' (power back); read it for counts\n");
    return 2;
  }
  S().backing = open(o.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (S().backing < 0) {
    std::fprintf(stderr, "kvfaultfs: %s: %s\n", o.backing, std::strerror(errno));
    return 1;
  }
  if (o.power_cut != 0) S().power = std::make_unique<kvfaultfs::PowerCut>(S().backing);
  // Absolute: in the background the file system runs from "/".
  S().rules_path = std::filesystem::absolute(o.rules).string();
#if FUSE_MAJOR_VERSION > 3 || (FUSE_MAJOR_VERSION == 3 && FUSE_MINOR_VERSION >= 12)
  // Operations a rule delays, hangs or paces each hold a thread: enough that the others go on (10
  // by default since libfuse 3.12, which added the limit).
  fuse_opt_add_arg(&args, "-omax_threads=128");
#endif
  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.opendir = OpenDir;
  ops.open = Open;
  ops.create = Create;
  ops.read = Read;
  ops.write = Write;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.fsyncdir = FsyncDir;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.rename = Rename;
  ops.link = Link;
  ops.truncate = Truncate;
  ops.chmod = Chmod;
  ops.utimens = Utimens;
  ops.statfs = StatFs;
  ops.flock = Flock;
  ops.init = Init;
  const int r = fuse_main(args.argc, args.argv, &ops, nullptr);
  fuse_opt_free_args(&args);
  return r;
}
