// MemoryRegions (memory/memory_regions.h): memory registered for fixed-buffer I/O on every tier
// that can, in pieces of at most kPieceBytes, each on its own once added (RegisterPiece), and
// only for the region it was added for; memory backed by a file taken back from a late read
// (the range punched, its piece registered again) and registered again over the pages its file has
// now (Refresh). On simulated tiers, whose registered buffer ids are their lowest free slot: a
// piece registered again while a lower slot is free moves to it, which is how a case sees it.
#include "memory/memory_regions.h"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "shared_memory.h"
#include "sim/sim_clock.h"
#include "sim/sim_device.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

constexpr size_t kPiece = MemoryRegions::kPieceBytes;

struct Rig {
  SimClock clock;
  Tiers tiers;
  uint8_t probe = 0;

  explicit Rig(int count) {
    for (int t = 0; t < count; ++t) {
      auto tier = std::make_unique<Tier>();
      tier->name = "t" + std::to_string(t);
      tier->device = std::make_unique<SimDevice>(&clock, 0, 0);
      tiers.push_back(std::move(tier));
    }
  }
  // The id the device's next registration would get (its lowest free slot).
  int NextId(int t) {
    absl::StatusOr<int> id = tiers[t]->device->RegisterRegion(&probe, 1);
    REQUIRE(id.ok());
    tiers[t]->device->UnregisterRegion(*id);
    return *id;
  }
};

// Adds a region and registers every piece of it, as the store does once their pages are in.
absl::Status AddRegistered(MemoryRegions& regions, uint8_t* base, size_t size, int fd) {
  absl::StatusOr<uint64_t> generation = regions.Add(base, size, fd, 0);
  if (!generation.ok()) return generation.status();
  for (size_t i = 0; i < MemoryRegions::Pieces(size); ++i) regions.RegisterPiece(base, *generation, i);
  return absl::OkStatus();
}

TEST_CASE("a region is added with no piece registered, and each piece registers on its own, once") {
  Rig rig(2);
  std::vector<uint8_t> memory(2 * kPiece + 4096);  // three pieces, the last one short
  MemoryRegions regions(rig.tiers);
  absl::StatusOr<uint64_t> generation = regions.Add(memory.data(), memory.size(), -1, 0);
  REQUIRE(generation.ok());
  CHECK(rig.NextId(0) == 0);  // nothing registered by Add
  CHECK(regions.Pending(memory.data(), 4096));  // reads into it go through bounce buffers meanwhile
  regions.RegisterPiece(memory.data(), *generation, 2);
  CHECK(rig.NextId(0) == 1);
  CHECK(rig.NextId(1) == 1);
  uint8_t* const last = memory.data() + 2 * kPiece;
  CHECK_FALSE(regions.Pending(last, 4096));
  CHECK(regions.Pending(last - 4096, 8192));  // also over piece 1, not registered
  CHECK_FALSE(regions.Pending(memory.data() + memory.size(), 4096));  // past the region
  const auto before = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(memory.data()) - 4096);
  CHECK_FALSE(regions.Pending(before, 4096));  // before it
  regions.RegisterPiece(memory.data(), *generation, 2);  // again: nothing
  regions.RegisterPiece(memory.data(), *generation, 3);  // no such piece: nothing
  regions.RegisterPiece(memory.data(), *generation + 1, 0);  // another region's generation: nothing
  CHECK(rig.NextId(0) == 1);
  regions.Refresh(memory.data(), 4096);  // piece 0 is not registered yet: left alone
  CHECK(rig.NextId(0) == 1);
  regions.Remove(memory.data());
  CHECK(rig.NextId(0) == 0);
  regions.RegisterPiece(memory.data(), *generation, 0);  // removed meanwhile: nothing
  CHECK(rig.NextId(0) == 0);

  // Added again at the same address: a new generation; the old one's pieces register nothing.
  absl::StatusOr<uint64_t> again = regions.Add(memory.data(), memory.size(), -1, 0);
  REQUIRE(again.ok());
  CHECK(*again != *generation);
  regions.RegisterPiece(memory.data(), *generation, 0);
  CHECK(rig.NextId(0) == 0);
  regions.RegisterPiece(memory.data(), *again, 0);
  CHECK(rig.NextId(0) == 1);
}

TEST_CASE("a region is registered on every tier in pieces, and unregistered when removed or forgotten") {
  Rig rig(2);
  std::vector<uint8_t> memory(2 * kPiece + 4096);  // three pieces, the last one short
  {
    MemoryRegions regions(rig.tiers);
    REQUIRE(AddRegistered(regions, memory.data(), memory.size(), -1).ok());
    CHECK(rig.NextId(0) == 3);
    CHECK(rig.NextId(1) == 3);
    regions.Remove(memory.data());
    CHECK(rig.NextId(0) == 0);
    CHECK(rig.NextId(1) == 0);
    regions.Remove(memory.data());  // again: nothing
    REQUIRE(AddRegistered(regions, memory.data(), kPiece, -1).ok());
    CHECK(rig.NextId(0) == 1);
  }
  CHECK(rig.NextId(0) == 0);  // the destructor unregistered it
  CHECK(rig.NextId(1) == 0);
}

TEST_CASE("Add refuses an empty region, and memory nothing can register unless a file backs it") {
  Rig none(0);  // no tier that registers buffers
  MappedSharedMemory memory(2 * 4096);
  MemoryRegions regions(none.tiers);
  CHECK(absl::IsInvalidArgument(regions.Add(nullptr, 4096, -1, 0).status()));
  CHECK(absl::IsInvalidArgument(regions.Add(memory.data(), 0, -1, 0).status()));
  CHECK(absl::IsUnimplemented(regions.Add(memory.data(), memory.size(), -1, 0).status()));
  CHECK(regions.Add(memory.data(), memory.size(), memory.fd(), 0).ok());  // it can still be punched
}

TEST_CASE("taking memory back punches the range out of what the region maps and registers its piece again") {
  Rig rig(1);
  MappedSharedMemory memory(kPiece + (1 << 20));  // two pieces
  const auto payload = Payload(memory.size(), 1);
  std::memcpy(memory.data(), payload.data(), payload.size());
  MemoryRegions regions(rig.tiers);
  uint8_t hole = 0;
  const int placeholder = *rig.tiers[0]->device->RegisterRegion(&hole, 1);  // slot 0 taken ...
  REQUIRE(AddRegistered(regions, memory.data(), memory.size(), memory.fd()).ok());   // ... pieces in 1, 2
  rig.tiers[0]->device->UnregisterRegion(placeholder);                       // slot 0 free again

  uint8_t* const p = memory.data() + 4096;
  REQUIRE(regions.TakeBack(0, 1, p, 8192));
  const std::vector<uint8_t> zeros(8192);
  CHECK(std::memcmp(p, zeros.data(), zeros.size()) == 0);  // fresh pages: a late read lands elsewhere
  CHECK(std::memcmp(memory.data(), payload.data(), 4096) == 0);
  CHECK(std::memcmp(p + 8192, payload.data() + 4096 + 8192, 4096) == 0);
  std::vector<uint8_t> file(8192, 0xff);
  REQUIRE(pread(memory.fd(), file.data(), file.size(), 4096) == 8192);
  CHECK(file == zeros);  // punched in the file, not only unmapped here
  CHECK(rig.NextId(0) == 1);  // piece 0 registered again (into slot 0), piece 1 left alone
  CHECK_FALSE(regions.TakeBack(0, 1, p, 4096));  // the old registration is no longer the piece's
  CHECK(regions.TakeBack(0, 0, p, 4096));
  CHECK(regions.TakeBack(0, 2, memory.data() + kPiece, 4096));
}

TEST_CASE("TakeBack refuses, touching nothing, what it cannot take back") {
  Rig rig(1);
  MappedSharedMemory memory(kPiece + (1 << 20));  // pieces 0 and 1: ids 0 and 1
  std::memset(memory.data(), 0x5a, memory.size());
  std::vector<uint8_t> plain(4 << 20);               // no file behind it: id 2
  MemoryRegions regions(rig.tiers);
  REQUIRE(AddRegistered(regions, memory.data(), memory.size(), memory.fd()).ok());
  REQUIRE(AddRegistered(regions, plain.data(), plain.size(), -1).ok());
  uint8_t* const m = memory.data();
  CHECK_FALSE(regions.TakeBack(0, -1, m, 4096));                       // not a registered read
  CHECK_FALSE(regions.TakeBack(0, 1, m, 4096));                        // another piece's id
  CHECK_FALSE(regions.TakeBack(0, 0, m + 100, 4096));                  // not page-aligned
  CHECK_FALSE(regions.TakeBack(0, 0, m, 100));                         // not whole pages
  CHECK_FALSE(regions.TakeBack(0, 0, m + kPiece - 4096, 8192));        // straddles two pieces
  CHECK_FALSE(regions.TakeBack(0, 1, m + memory.size() - 4096, 8192)); // past the region's end
  CHECK_FALSE(regions.TakeBack(0, 2, plain.data(), 4096));             // nothing to punch
  MappedSharedMemory pending(4 << 20);
  std::memset(pending.data(), 0x5a, pending.size());
  REQUIRE(regions.Add(pending.data(), pending.size(), pending.fd(), 0).ok());  // its piece not registered yet
  CHECK_FALSE(regions.TakeBack(0, 0, pending.data(), 4096));
  CHECK(pending.data()[0] == 0x5a);
  const uintptr_t lowest = std::min(reinterpret_cast<uintptr_t>(m), reinterpret_cast<uintptr_t>(plain.data()));
  CHECK_FALSE(regions.TakeBack(0, 0, reinterpret_cast<uint8_t*>(lowest - 4096), 4096));  // below every region
  for (size_t i = 0; i < memory.size(); i += 4096) REQUIRE(m[i] == 0x5a);
  regions.Remove(m);
  CHECK_FALSE(regions.TakeBack(0, 0, m, 4096));  // removed
  CHECK(m[0] == 0x5a);
}

TEST_CASE("TakeBack takes back only whole pages of the region's file: huge pages on hugetlbfs") {
  // A punch inside a huge page zeroes it in place, so a late read into it would still be seen.
  const int huge = memfd_create("kvstream-test-huge", MFD_CLOEXEC | MFD_HUGETLB);
  struct stat st;
  if (huge < 0 || fstat(huge, &st) != 0 || st.st_blksize <= 4096) {
    if (huge >= 0) close(huge);
    WARN("skipped: the kernel has no huge pages for memfds");
    std::exit(kSkipExitCode);
  }
  const size_t page = static_cast<size_t>(st.st_blksize);
  REQUIRE(ftruncate(huge, static_cast<off_t>(2 * page)) == 0);  // no huge page used until touched
  Rig rig(1);
  std::vector<uint8_t> memory(2 * page);  // the addresses the region would map (not touched here)
  MemoryRegions regions(rig.tiers);
  REQUIRE(AddRegistered(regions, memory.data(), memory.size(), huge).ok());
  CHECK_FALSE(regions.TakeBack(0, 0, memory.data(), 4096));
  CHECK_FALSE(regions.TakeBack(0, 0, memory.data() + 4096, page));
  CHECK(regions.TakeBack(0, 0, memory.data(), page));
  regions.Remove(memory.data());
  close(huge);
}

TEST_CASE("Refresh registers again the pieces covering a range of file-backed memory, and only those") {
  Rig rig(1);
  MappedSharedMemory memory(2 * kPiece + (1 << 20));  // three pieces
  std::vector<uint8_t> plain(kPiece);
  MemoryRegions regions(rig.tiers);
  uint8_t hole = 0;
  const int placeholder = *rig.tiers[0]->device->RegisterRegion(&hole, 1);
  REQUIRE(AddRegistered(regions, memory.data(), memory.size(), memory.fd()).ok());  // ids 1, 2, 3
  REQUIRE(AddRegistered(regions, plain.data(), plain.size(), -1).ok());             // id 4
  rig.tiers[0]->device->UnregisterRegion(placeholder);

  regions.Refresh(plain.data(), 4096);  // no file: left alone
  CHECK(rig.NextId(0) == 0);
  regions.Refresh(memory.data() + memory.size() - 4096, 8192);  // past the end: nothing
  CHECK(rig.NextId(0) == 0);
  // Over the boundary of pieces 0 and 1: they move to slots 0 and 1, piece 2 stays in 3.
  regions.Refresh(memory.data() + kPiece - 4096, 8192);
  CHECK(rig.NextId(0) == 2);
  CHECK(regions.TakeBack(0, 3, memory.data() + 2 * kPiece, 4096));
}

}  // namespace
}  // namespace kvstream::testing
