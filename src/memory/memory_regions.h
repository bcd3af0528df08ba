// MemoryRegions: long-lived memory registered with the store (Store::RegisterMemory), such as a
// session's arena. Each region is registered for fixed-buffer I/O on every tier that can, in
// pieces of at most kPieceBytes, so a read into it targets the pages it was registered with, not
// whatever the address maps when the kernel gets to it. Registering pins a piece's pages, which
// faults them in first (0.75 s per GiB and more): so a region is added with no piece
// registered, and each piece is registered on its own once its pages are in (the store faults
// them in off its loop: memory/page_faulter.h). Reads into a piece not registered yet go through
// bounce buffers (Pending): its pages could not be taken back from a late read, which a bounced
// read never needs.
//
// Memory backed by a file the store may punch (a memfd or a tmpfs file) can be taken back from a
// late read: the file gets fresh pages under the range (fallocate PUNCH_HOLE) and the piece is
// registered again over them, so a read still in flight into the old registration lands in pages
// nobody maps any more. That is what makes hedging a read that went straight into a caller's
// buffer safe (read/step_reader.h). Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "io/tier.h"

namespace kvstream {

class MemoryRegions {
 public:
  static constexpr size_t kPieceBytes = 16ull << 20;  // taking memory back registers one piece again

  explicit MemoryRegions(const Tiers& tiers) : tiers_(tiers) {}
  ~MemoryRegions();

  // Adds [base, base + size), none of its pieces registered yet (RegisterPiece; all of them at once
  // when no tier can register buffers), and returns its generation: the name of this region, not
  // of a later one at the same address. `fd` >= 0: the file that maps it from `fd_offset`, which
  // the store may punch holes in (the caller keeps it open until Remove). Unimplemented when no
  // tier can register buffers and there is no fd (nothing to gain: reads into it still work).
  absl::StatusOr<uint64_t> Add(uint8_t* base, size_t size, int fd, uint64_t fd_offset);
  // Registers piece `piece` (of Pieces(size)) of the region `generation` at `base` on every tier
  // that can; nothing when that region is gone or the piece is registered already.
  void RegisterPiece(const uint8_t* base, uint64_t generation, size_t piece);
  static size_t Pieces(size_t size) { return (size + kPieceBytes - 1) / kPieceBytes; }
  // Whether every piece of the region at `base` is registered (false when there is none).
  bool Registered(const void* base) const;
  // Whether [p, p + length) lies in a region a piece of which, covering part of it, is not
  // registered yet (false outside every region).
  bool Pending(const uint8_t* p, size_t length) const;
  // REQUIRES: no read into the region is in flight, late ones included.
  void Remove(const void* base);

  // True when a late read into [p, p + length) that used the registered buffer `region_id` of
  // `tier` can no longer be seen by the region's users: the range is punched and its piece
  // registered again. False when that is impossible (no fd, not whole pages of the file, not
  // registered).
  bool TakeBack(int tier, int region_id, uint8_t* p, size_t length);
  // Registers the pieces covering [p, p + length) again, over the pages their file has now: a
  // client that truncated its memory and grew it back has new pages under the old addresses,
  // while the registration still pins the old ones. Regions without an fd, and pieces not
  // registered yet, are left alone.
  void Refresh(uint8_t* p, size_t length);

 private:
  struct Piece {
    uint8_t* base = nullptr;
    size_t size = 0;
    bool registered = false;  // by RegisterPiece (ids may still all be -1: no tier could)
    std::vector<int> ids;     // registered buffer id per tier, or -1
  };
  struct Region {
    uint64_t generation = 0;
    size_t size = 0;
    int fd = -1;
    uint64_t fd_offset = 0;
    // The file's page (st_blksize: a huge page on hugetlbfs, where a punch inside one zeroes it
    // in place instead of replacing it): only whole ones are taken back.
    size_t page = 0;
    std::vector<Piece> pieces;
  };
  void Register(Piece* piece);
  void Unregister(Piece* piece);

  const Tiers& tiers_;
  std::map<const uint8_t*, Region> regions_;  // by base
  uint64_t next_generation_ = 1;
};

}  // namespace kvstream
