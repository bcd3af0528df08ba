#include "io/chunk_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace kvstream {

bool IsHexStem(std::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status InTier(const std::string& root, const absl::Status& s) {
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat("tier ", root, ": ", s.message()));
}

absl::StatusOr<ScannedChunk> ReadChunkFileHeader(int dir, const std::string& dir_path, const std::string& rel,
                                                 std::string_view stem, const ExpectedOwner& owner,
                                                 const ChunkMacKey* mac_key, bool require_mac) {
  const std::string path = absl::StrCat(dir_path, "/", rel);
  absl::StatusOr<int> opened = OpenFileBeneath(dir, rel, O_RDONLY, owner);
  if (!opened.ok()) return InTier(dir_path, opened.status());
  const int fd = *opened;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("stat ", path));
  }
  std::vector<uint8_t> buf(kFileAlignment);
  ssize_t n = pread(fd, buf.data(), buf.size(), 0);
  absl::StatusOr<ChunkMeta> meta = n < 0 ? absl::DataLossError("unreadable header")
                                         : DecodeChunkHeader(buf.data(), static_cast<size_t>(n));
  if (absl::IsOutOfRange(meta.status())) {  // a long key or many segments: read the whole header
    buf.resize(*ChunkHeaderSize(buf.data(), buf.size()));
    n = pread(fd, buf.data(), buf.size(), 0);
    meta = n < 0 ? absl::DataLossError("unreadable header") : DecodeChunkHeader(buf.data(), n);
    if (absl::IsOutOfRange(meta.status())) meta = absl::DataLossError("header truncated");
  }
  close(fd);
  if (!meta.ok()) return meta.status();
  if (absl::Status s = VerifyChunkMac(*meta, mac_key, require_mac); !s.ok()) return s;
  if (FileStem(meta->key) != stem) return absl::DataLossError("file name does not match its key");
  if (static_cast<uint64_t>(st.st_size) != meta->file_size()) {
    return absl::DataLossError(absl::StrCat("file is ", st.st_size, " bytes, header says ",
                                            meta->file_size()));
  }
  return ScannedChunk{*std::move(meta), static_cast<uint64_t>(st.st_size)};
}

std::vector<absl::StatusOr<ScannedChunk>> ReadChunkFileHeaders(
    int dir, const std::string& dir_path, const std::vector<std::pair<std::string, std::string>>& files,
    const ExpectedOwner& owner, const ChunkMacKey* mac_key, bool require_mac) {
  constexpr size_t kThreads = 8;  // header reads in flight
  std::vector<absl::StatusOr<ScannedChunk>> headers(files.size(), absl::UnknownError("not read"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> readers;
  for (size_t r = 0; r < std::min(kThreads, files.size()); ++r) {
    readers.emplace_back([&] {
      for (size_t i = next++; i < files.size(); i = next++) {
        headers[i] = ReadChunkFileHeader(dir, dir_path, files[i].first, files[i].second, owner, mac_key, require_mac);
      }
    });
  }
  for (auto& t : readers) t.join();
  return headers;
}

std::vector<ScannedChunk> SavedChunks(std::vector<ChunkMeta> saved, const std::string& tier_path,
                                      const ChunkMacKey* mac_key, bool require_mac) {
  std::vector<ScannedChunk> out;
  for (ChunkMeta& m : saved) {
    if (absl::Status s = VerifyChunkMac(m, mac_key, require_mac); !s.ok()) {
      LogRefusedChunk(tier_path, FileStem(m.key), s);
      continue;
    }
    const uint64_t size = m.file_size();
    out.push_back({std::move(m), size});
  }
  return out;
}

void SkippedNames::Add(const std::string& rel, const std::string& what) {
  if (count++ < 4) examples.push_back(absl::StrCat(rel, " (", what, ")"));
}

void SkippedNames::Log(const std::string& tier_path, const char* during) const {
  if (count == 0) return;
  spdlog::warn("tier {}: {} skipped {} names that are not the daemon's regular files (not opened, read or "
               "removed): {}{}", tier_path, during, count, absl::StrJoin(examples, ", "), count > examples.size() ? ", ..." : "");
}

absl::Status ForEachChunkFile(
    int root, const std::function<void(int, const std::string&, const std::string&, const std::string&)>& on_chunk,
    const std::function<void(int, const std::string&)>& on_temp, SkippedNames* skipped) {
  std::vector<std::string> dirs;
  absl::Status status = ListDirectory(root, [&](const std::string& name, EntryKind kind) {
    if (!IsHexStem(name, 2)) return;
    if (kind == EntryKind::kDirectory) {
      dirs.push_back(name);
    } else {
      skipped->Add(name, std::string(ToString(kind)));
    }
  });
  for (size_t d = 0; d < dirs.size() && status.ok(); ++d) {
    const std::string& dir_name = dirs[d];
    absl::StatusOr<int> dir = OpenDirectoryBeneath(root, dir_name);
    if (!dir.ok()) {  // replaced since it was listed
      if (IsRefused(dir.status())) skipped->Add(dir_name, std::string(ToString(EntryKindAt(root, dir_name.c_str()))));
      if (!IsRefused(dir.status()) && !absl::IsNotFound(dir.status())) status = dir.status();
      continue;
    }
    status = ListDirectory(*dir, [&](const std::string& name, EntryKind kind) {
      const bool temp = absl::StrContains(name, kTempMarker);
      std::string stem;
      if (!temp) {
        if (!absl::EndsWith(name, kChunkSuffix)) return;
        stem = name.substr(0, name.size() - kChunkSuffixLength);
        if (!IsHexStem(stem, 32) || stem.substr(0, 2) != dir_name) return;
      }
      const std::string rel = absl::StrCat(dir_name, "/", name);
      if (kind != EntryKind::kRegular) {
        skipped->Add(rel, std::string(ToString(kind)));
      } else if (temp) {
        on_temp(*dir, name);
      } else {
        on_chunk(*dir, name, rel, stem);
      }
    });
    close(*dir);
  }
  return status;
}

}  // namespace kvstream
