// BufferSlots: the table of registered buffers a device's rings share: which memory each slot
// holds, and which slot, if any, covers an op's buffer (so the op is issued on it, as a fixed
// buffer op). The rings are updated by the caller; this only keeps the table. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace kvstream {

class BufferSlots {
 public:
  // `count` free slots (the rings registered a sparse table of that size).
  void Reset(unsigned count);

  // A free slot, or -1 when every slot holds memory.
  int Free() const { return free_.empty() ? -1 : free_.back(); }
  // Slot `slot` (from Free) now holds [base, base + size).
  void Take(int slot, void* base, size_t size);
  // Whether `slot` holds memory.
  bool Holds(int slot) const;
  // Slot `slot` holds nothing any more. REQUIRES: Holds(slot).
  void Release(int slot);

  // The slot whose memory holds all of [buffer, buffer + length), or -1.
  int Covering(const void* buffer, size_t length) const;

 private:
  struct Slot {
    uintptr_t base = 0;
    size_t size = 0;  // 0: free
  };
  std::vector<Slot> slots_;
  std::vector<int> free_;
  std::map<uintptr_t, int> by_base_;  // slots holding memory, by their memory's address
};

}  // namespace kvstream
