#include "io/buffer_slots.h"

#include <iterator>

namespace kvstream {

void BufferSlots::Reset(unsigned count) {
  slots_.assign(count, Slot{});
  free_.clear();
  by_base_.clear();
  for (int i = static_cast<int>(count); i > 0; --i) free_.push_back(i - 1);
}

void BufferSlots::Take(int slot, void* base, size_t size) {
  if (!free_.empty() && free_.back() == slot) {
    free_.pop_back();
  } else {
    std::erase(free_, slot);
  }
  slots_[slot] = {reinterpret_cast<uintptr_t>(base), size};
  by_base_[slots_[slot].base] = slot;
}

bool BufferSlots::Holds(int slot) const {
  return slot >= 0 && static_cast<size_t>(slot) < slots_.size() && slots_[slot].size != 0;
}

void BufferSlots::Release(int slot) {
  by_base_.erase(slots_[slot].base);
  slots_[slot] = {};
  free_.push_back(slot);
}

int BufferSlots::Covering(const void* buffer, size_t length) const {
  if (by_base_.empty()) return -1;
  const auto b = reinterpret_cast<uintptr_t>(buffer);
  auto it = by_base_.upper_bound(b);
  if (it == by_base_.begin()) return -1;
  const int slot = std::prev(it)->second;
  const Slot& s = slots_[slot];
  return b + length <= s.base + s.size ? slot : -1;
}

}  // namespace kvstream
