#include "index_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "tier_device.h"

namespace kvstream {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'I', 'N', 'D', 'E', 'X'};
constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads fixed-size values off a byte string; `ok` turns false past its end.
struct Reader {
  const std::string& bytes;
  size_t at = 0;
  bool ok = true;
  template <typename T>
  T Get() {
    T v{};
    if (at + sizeof(T) > bytes.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string GetString(size_t n) {
    if (at + n > bytes.size()) {
      ok = false;
      return {};
    }
    at += n;
    return bytes.substr(at - n, n);
  }
};

}  // namespace

std::string EncodeCheckpoint(const std::vector<ChunkMeta>& chunks) {
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, kVersion);
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
  }
  Put(&out, Checksum(out.data(), out.size()));
  return out;
}

absl::StatusOr<std::vector<ChunkMeta>> DecodeCheckpoint(const std::string& bytes) {
  if (bytes.size() < sizeof(kMagic) + 4 + 8 + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not an index checkpoint");
  }
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (Checksum(bytes.data(), bytes.size() - 8) != stored) return absl::DataLossError("checkpoint checksum mismatch");
  Reader in{bytes, sizeof(kMagic)};
  if (in.Get<uint32_t>() != kVersion) return absl::DataLossError("unsupported checkpoint version");
  const uint64_t count = in.Get<uint64_t>();
  std::vector<ChunkMeta> chunks;
  for (uint64_t i = 0; i < count && in.ok; ++i) {
    ChunkMeta m;
    const uint32_t key_length = in.Get<uint32_t>();
    if (key_length == 0 || key_length > kMaxKeyLength) return absl::DataLossError("bad key length in checkpoint");
    m.key = in.GetString(key_length);
    m.payload_size = in.Get<uint64_t>();
    m.payload_checksum = in.Get<uint64_t>();
    m.created_unix_ns = in.Get<int64_t>();
    m.segment_size = in.Get<uint32_t>();
    const uint32_t segments = in.Get<uint32_t>();
    if (m.segment_size == 0 || m.payload_size == 0 || segments != SegmentCount(m.payload_size, m.segment_size)) {
      return absl::DataLossError("bad sizes in checkpoint");
    }
    for (uint32_t s = 0; s < segments && in.ok; ++s) m.segment_checksums.push_back(in.Get<uint64_t>());
    chunks.push_back(std::move(m));
  }
  if (!in.ok || in.at != bytes.size() - 8) return absl::DataLossError("checkpoint truncated");
  return chunks;
}

absl::Status WriteCheckpoint(const std::string& dir, const std::vector<ChunkMeta>& chunks) {
  const std::string path = absl::StrCat(dir, "/", kCheckpointName), temp = path + ".tmp";
  const std::string bytes = EncodeCheckpoint(chunks);
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoStatus(errno, "create " + temp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(temp.c_str());
      return ErrnoStatus(err, "write " + temp);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fdatasync(fd) == 0;
  close(fd);
  if (!synced || rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return ErrnoStatus(err, "commit " + path);
  }
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkMeta>> TakeCheckpoint(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kCheckpointName);
  unlink((path + ".tmp").c_str());  // a write that did not finish
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("no checkpoint");
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  // Consumed: from now on the files may change, and the next start must not trust this list.
  if (unlink(path.c_str()) != 0) return ErrnoStatus(errno, "remove " + path);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);  // the removal must be on disk before any file changes
    close(dfd);
  }
  return DecodeCheckpoint(bytes);
}

}  // namespace kvstream
