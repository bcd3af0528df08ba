#include "memory/memory_regions.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spdlog/spdlog.h"

namespace kvstream {

MemoryRegions::~MemoryRegions() {
  for (auto& [base, region] : regions_) {
    for (Piece& p : region.pieces) Unregister(&p);
  }
}

void MemoryRegions::Register(Piece* piece) {
  piece->ids.assign(tiers_.size(), -1);
  for (size_t t = 0; t < tiers_.size(); ++t) {
    absl::StatusOr<int> id = tiers_[t]->device->RegisterRegion(piece->base, piece->size);
    if (id.ok()) piece->ids[t] = *id;
  }
}

void MemoryRegions::Unregister(Piece* piece) {
  for (size_t t = 0; t < piece->ids.size(); ++t) {
    if (piece->ids[t] >= 0) tiers_[t]->device->UnregisterRegion(piece->ids[t]);
    piece->ids[t] = -1;
  }
}

absl::Status MemoryRegions::Add(uint8_t* base, size_t size, int fd, uint64_t fd_offset) {
  if (base == nullptr || size == 0) return absl::InvalidArgumentError("empty region");
  Region region;
  region.size = size;
  region.fd = fd;
  region.fd_offset = fd_offset;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_blksize > 0) region.page = static_cast<size_t>(st.st_blksize);
  for (size_t offset = 0; offset < size; offset += kPieceBytes) {
    region.pieces.push_back({base + offset, std::min(kPieceBytes, size - offset), std::vector<int>(tiers_.size(), -1)});
  }
  // The first piece tells whether any tier registers buffers (all pieces are alike).
  Register(&region.pieces[0]);
  region.registered = 1;
  const std::vector<int>& ids = region.pieces[0].ids;
  if (fd < 0 && std::none_of(ids.begin(), ids.end(), [](int id) { return id >= 0; })) {
    return absl::UnimplementedError("no tier can register buffers");
  }
  regions_[base] = std::move(region);
  return absl::OkStatus();
}

bool MemoryRegions::RegisterNextPiece(const void* base) {
  auto it = regions_.find(static_cast<const uint8_t*>(base));
  if (it == regions_.end() || it->second.registered == it->second.pieces.size()) return false;
  Register(&it->second.pieces[it->second.registered++]);
  return true;
}

void MemoryRegions::Remove(const void* base) {
  auto it = regions_.find(static_cast<const uint8_t*>(base));
  if (it == regions_.end()) return;
  for (Piece& p : it->second.pieces) Unregister(&p);
  regions_.erase(it);
}

bool MemoryRegions::TakeBack(int tier, int region_id, uint8_t* p, size_t length) {
  if (region_id < 0 || regions_.empty()) return false;
  auto it = regions_.upper_bound(p);
  if (it == regions_.begin()) return false;
  --it;
  const uint8_t* base = it->first;
  Region& region = it->second;
  const size_t page = std::max(region.page, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  const uint64_t in_file = region.fd_offset + static_cast<uint64_t>(p - base);
  if (region.fd < 0 || p + length > base + region.size || (p - base) % page != 0 || in_file % page != 0 ||
      length % page != 0) {
    return false;
  }
  Piece& piece = region.pieces[(p - base) / kPieceBytes];
  if (piece.ids[tier] != region_id || p + length > piece.base + piece.size) return false;
  const off_t offset = static_cast<off_t>(region.fd_offset + (p - base));
  if (fallocate(region.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, static_cast<off_t>(length)) != 0) {
    spdlog::warn("cannot take back memory from a late read (fallocate: {})", std::strerror(errno));
    return false;
  }
  // Reads in flight keep the old registration (and its pages) until they complete.
  Unregister(&piece);
  Register(&piece);
  return true;
}

void MemoryRegions::Refresh(uint8_t* p, size_t length) {
  if (length == 0) return;  // no piece covers an empty range
  auto it = regions_.upper_bound(p);
  if (it == regions_.begin()) return;
  --it;
  uint8_t* base = const_cast<uint8_t*>(it->first);
  Region& region = it->second;
  if (region.fd < 0 || p + length > base + region.size) return;
  const size_t first = (p - base) / kPieceBytes;
  // Pieces not registered yet will be, over what the file maps then.
  const size_t last = std::min((p + length - 1 - base) / kPieceBytes + 1, region.registered);
  for (size_t i = first; i < last; ++i) {
    Unregister(&region.pieces[i]);  // reads in flight keep the old registration until they complete
    Register(&region.pieces[i]);
  }
}

}  // namespace kvstream
