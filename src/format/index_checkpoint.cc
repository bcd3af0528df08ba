#include "format/index_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/errno_status.h"

namespace kvstream {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'I', 'N', 'D', 'E', 'X'};
constexpr char kTemp[] = ".kvstream.index.tmp";  // kCheckpointName while it is being written
constexpr size_t kPreambleBytes = sizeof(kMagic) + 4 + 8;  // magic, version, count
constexpr size_t kTrailerBytes = 8;                        // the checksum
// The fewest bytes an entry takes: a 1-byte key, one segment (and, from version 2, its flags).
constexpr size_t kMinEntryBytes = 4 + 1 + 8 + 8 + 8 + 4 + 4 + 8;
// An entry's flags: the header's MAC flag, and (version 3) this one for an authenticated chunk
// (format version 2), whose nonce and segment tags come before its MAC.
constexpr uint32_t kEntryAuthenticated = 1u << 1;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads fixed-size values off a byte string; `ok` turns false past its end and stays false.
struct Reader {
  std::string_view bytes;
  size_t at = 0;
  bool ok = true;
  size_t left() const { return bytes.size() - at; }
  template <typename T>
  T Get() {
    T v{};
    if (!ok || left() < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string_view GetBytes(size_t n) {
    if (!ok || left() < n) {
      ok = false;
      return {};
    }
    at += n;
    return bytes.substr(at - n, n);
  }
};

absl::Status Damaged(std::string_view why) { return absl::DataLossError(absl::StrCat("checkpoint: ", std::string(why))); }

// One entry of `in`, every count bounded by the bytes left before anything is allocated.
absl::StatusOr<ChunkMeta> DecodeEntry(Reader& in, uint32_t version) {
  ChunkMeta m;
  const uint32_t key_length = in.Get<uint32_t>();
  if (key_length == 0 || key_length > kMaxKeyLength) return Damaged("bad key length");
  m.key = std::string(in.GetBytes(key_length));
  m.payload_size = in.Get<uint64_t>();
  m.payload_checksum = in.Get<uint64_t>();
  m.created_unix_ns = in.Get<int64_t>();
  m.segment_size = in.Get<uint32_t>();
  const uint32_t segments = in.Get<uint32_t>();
  if (!in.ok) return Damaged("truncated");
  if (m.payload_size == 0 || m.payload_size > kMaxPayloadBytes || m.segment_size == 0 ||
      uint64_t{segments} != SegmentCount(m.payload_size, m.segment_size)) {
    return Damaged("bad sizes");
  }
  if (segments > in.left() / 8) return Damaged(absl::StrCat(segments, " segment checksums in ", in.left(), " bytes"));
  m.segment_checksums.resize(segments);
  const std::string_view sums = in.GetBytes(8ull * segments);
  std::memcpy(m.segment_checksums.data(), sums.data(), sums.size());
  if (version >= 2) {
    const uint32_t flags = in.Get<uint32_t>();
    const uint32_t known = kKnownHeaderFlags | (version >= 3 ? kEntryAuthenticated : 0);
    if ((flags & ~known) != 0) return Damaged("unknown chunk flags");
    if ((flags & kEntryAuthenticated) && !(flags & kHeaderFlagMac)) return Damaged("authenticated without a MAC");
    if (flags & kEntryAuthenticated) {
      ChunkAuth& auth = m.auth.emplace();
      const std::string_view nonce = in.GetBytes(kChunkNonceBytes);
      if (!in.ok) return Damaged("truncated");
      std::memcpy(auth.nonce.data(), nonce.data(), kChunkNonceBytes);
      if (segments > in.left() / kSegmentTagBytes) return Damaged("segment tags truncated");
      auth.tags.resize(segments);
      const std::string_view tags = in.GetBytes(size_t{kSegmentTagBytes} * segments);
      std::memcpy(auth.tags.data(), tags.data(), tags.size());
    }
    if (flags & kHeaderFlagMac) {
      const std::string_view mac = in.GetBytes(kChunkMacBytes);
      if (!in.ok) return Damaged("truncated");
      m.mac.emplace();
      std::memcpy(m.mac->data(), mac.data(), kChunkMacBytes);
    }
  }
  if (!in.ok) return Damaged("truncated");
  if (!ChunkLayoutFits(m.key.size(), m.payload_size, m.segment_size, m.layout()).ok()) {
    return Damaged("a chunk the format cannot hold");
  }
  return m;
}

}  // namespace

std::string EncodeCheckpoint(const std::vector<ChunkMeta>& chunks) {
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, kCheckpointVersion);
  Put(&out, static_cast<uint64_t>(chunks.size()));
  for (const ChunkMeta& m : chunks) {
    Put(&out, static_cast<uint32_t>(m.key.size()));
    out += m.key;
    Put(&out, m.payload_size);
    Put(&out, m.payload_checksum);
    Put(&out, m.created_unix_ns);
    Put(&out, m.segment_size);
    Put(&out, m.segment_count());
    for (uint64_t c : m.segment_checksums) Put(&out, c);
    Put(&out, (m.mac ? kHeaderFlagMac : uint32_t{0}) | (m.auth ? kEntryAuthenticated : uint32_t{0}));
    if (m.auth) {
      out.append(reinterpret_cast<const char*>(m.auth->nonce.data()), kChunkNonceBytes);
      out.append(reinterpret_cast<const char*>(m.auth->tags.data()), size_t{kSegmentTagBytes} * m.auth->tags.size());
    }
    if (m.mac) out.append(reinterpret_cast<const char*>(m.mac->data()), m.mac->size());
  }
  Put(&out, Checksum(out.data(), out.size()));
  return out;
}

absl::StatusOr<std::vector<ChunkMeta>> DecodeCheckpoint(std::string_view bytes) {
  if (bytes.size() < kPreambleBytes + kTrailerBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not an index checkpoint");
  }
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - kTrailerBytes, kTrailerBytes);
  if (Checksum(bytes.data(), bytes.size() - kTrailerBytes) != stored) return Damaged("checksum mismatch");
  Reader in{bytes.substr(0, bytes.size() - kTrailerBytes), sizeof(kMagic)};
  const uint32_t version = in.Get<uint32_t>();
  if (version < 1 || version > kCheckpointVersion) return Damaged(absl::StrCat("unsupported version ", version));
  const uint64_t count = in.Get<uint64_t>();
  const size_t min_entry = kMinEntryBytes + (version >= 2 ? 4 : 0);
  if (count > in.left() / min_entry) return Damaged(absl::StrCat(count, " chunks claimed in ", in.left(), " bytes"));
  std::vector<ChunkMeta> chunks;
  chunks.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    absl::StatusOr<ChunkMeta> m = DecodeEntry(in, version);
    if (!m.ok()) return m.status();
    chunks.push_back(*std::move(m));
  }
  if (in.left() != 0) return Damaged("trailing bytes");
  return chunks;
}

absl::Status WriteCheckpoint(int dir_fd, const std::string& dir, const std::vector<ChunkMeta>& chunks) {
  const std::string path = absl::StrCat(dir, "/", kCheckpointName), temp = absl::StrCat(dir, "/", kTemp);
  const std::string bytes = EncodeCheckpoint(chunks);
  // Whatever is under the temporary's name goes first (a symlink planted there would otherwise
  // have the write land on its target); the new file is created, never opened through a link.
  unlinkat(dir_fd, kTemp, 0);
  const int fd = openat(dir_fd, kTemp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoStatus(errno, "create " + temp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlinkat(dir_fd, kTemp, 0);
      return ErrnoStatus(err, "write " + temp);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fdatasync(fd) == 0;
  close(fd);
  // renameat replaces whatever has the name (a planted symlink itself, never its target).
  if (!synced || renameat(dir_fd, kTemp, dir_fd, kCheckpointName) != 0) {
    const int err = errno;
    unlinkat(dir_fd, kTemp, 0);
    return ErrnoStatus(err, "commit " + path);
  }
  fsync(dir_fd);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkMeta>> TakeCheckpoint(int dir_fd, const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kCheckpointName);
  struct stat st;
  if (fstatat(dir_fd, kTemp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
    unlinkat(dir_fd, kTemp, 0);  // a write that did not finish
  }
  // Never follows a symlink, never blocks (a FIFO), never reads a device: only a regular file.
  const int fd = openat(dir_fd, kCheckpointName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError("no checkpoint");
    if (err == ELOOP) return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link: not read, left in place"));
    return ErrnoStatus(err, "open " + path);
  }
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, "stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file: not read, left in place"));
  }
  std::string bytes;
  absl::Status read;
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > kMaxCheckpointBytes) {
    read = absl::DataLossError(absl::StrCat(path, " is ", st.st_size, " bytes, more than a checkpoint may be (",
                                            kMaxCheckpointBytes, "): not read"));
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (done != bytes.size()) read = absl::DataLossError(absl::StrCat("reading ", path, ": short read"));
  }
  close(fd);
  // Consumed: from now on the files may change, and the next start must not trust this list. The
  // name is removed only while it is still the regular file just read.
  struct stat named;
  if (fstatat(dir_fd, kCheckpointName, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st.st_dev &&
      named.st_ino == st.st_ino && unlinkat(dir_fd, kCheckpointName, 0) != 0) {
    return ErrnoStatus(errno, "remove " + path);
  }
  fsync(dir_fd);  // the removal must be on disk before any file changes
  if (!read.ok()) return read;
  return DecodeCheckpoint(bytes);
}

}  // namespace kvstream
