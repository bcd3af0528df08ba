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
  piece->registered = true;
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
  piece->registered = false;
}

absl::StatusOr<uint64_t> MemoryRegions::Add(uint8_t* base, size_t size, int fd, uint64_t fd_offset) {
  if (base == nullptr || size == 0) return absl::InvalidArgumentError("empty region");
  const bool any =
      std::any_of(tiers_.begin(), tiers_.end(), [](const auto& t) { return t->device->properties().fixed_buffers; });
  if (!any && fd < 0) return absl::UnimplementedError("no tier can register buffers");
  Region region;
  region.generation = next_generation_++;
  region.size = size;
  region.fd = fd;
  region.fd_offset = fd_offset;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_blksize > 0) region.page = static_cast<size_t>(st.st_blksize);
  for (size_t offset = 0; offset < size; offset += kPieceBytes) {
    // With no tier to register it on (only its fd kept), there is nothing to wait for.
    region.pieces.push_back(
        {base + offset, std::min(kPieceBytes, size - offset), !any, std::vector<int>(tiers_.size(), -1)});
  }
  const uint64_t generation = region.generation;
  Remove(base);  // a region added again at the same address replaces the old one
  regions_[base] = std::move(region);
  return generation;
}

bool MemoryRegions::Registered(const void* base) const {
  auto it = regions_.find(static_cast<const uint8_t*>(base));
  return it != regions_.end() &&
         std::all_of(it->second.pieces.begin(), it->second.pieces.end(), [](const Piece& p) { return p.registered; });
}

bool MemoryRegions::Pending(const uint8_t* p, size_t length) const {
  auto it = regions_.upper_bound(p);
  if (it == regions_.begin() || length == 0) return false;
  --it;
  const uint8_t* base = it->first;
  const Region& region = it->second;
  if (p >= base + region.size) return false;
  const size_t first = (p - base) / kPieceBytes;
  const size_t last = std::min<size_t>((p + length - 1 - base) / kPieceBytes, region.pieces.size() - 1);
  for (size_t i = first; i <= last; ++i) {
    if (!region.pieces[i].registered) return true;
  }
  return false;
}

void MemoryRegions::RegisterPiece(const uint8_t* base, uint64_t generation, size_t piece) {
  auto it = regions_.find(base);
  if (it == regions_.end() || it->second.generation != generation || piece >= it->second.pieces.size()) return;
  Piece& p = it->second.pieces[piece];
  if (!p.registered) Register(&p);
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
  const size_t last = (p + length - 1 - base) / kPieceBytes;
  for (size_t i = first; i <= last; ++i) {
    if (!region.pieces[i].registered) continue;  // registered once its pages are in
    Unregister(&region.pieces[i]);  // reads in flight keep the old registration until they complete
    Register(&region.pieces[i]);
  }
}

}  // namespace kvstream
