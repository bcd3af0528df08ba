#include "uid_slots.h"

#include "absl/strings/str_cat.h"

namespace kvstream {

UidSlots::Slot& UidSlots::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    reset();
    counts_ = std::move(other.counts_);
    uid_ = other.uid_;
  }
  return *this;
}

void UidSlots::Slot::reset() {
  if (counts_ == nullptr) return;
  {
    absl::MutexLock lock(&counts_->mu);
    --counts_->total;
    auto it = counts_->per_uid.find(uid_);
    if (--it->second == 0) counts_->per_uid.erase(it);
  }
  counts_.reset();
}

UidSlots::UidSlots(std::string what, Limits limits)
    : what_(std::move(what)), limits_(limits), counts_(std::make_shared<Counts>()) {}

absl::StatusOr<UidSlots::Slot> UidSlots::Take(uid_t uid) {
  absl::MutexLock lock(&counts_->mu);
  if (counts_->total >= limits_.total) {
    return absl::ResourceExhaustedError(absl::StrCat("all ", limits_.total, " ", what_, " are taken"));
  }
  uint32_t& held = counts_->per_uid[uid];
  if (held >= limits_.per_uid) {
    const uint32_t now = held;
    if (now == 0) counts_->per_uid.erase(uid);
    return absl::ResourceExhaustedError(
        absl::StrCat("uid ", uid, " holds ", now, " ", what_, ", the most one uid may (", limits_.total, " in all)"));
  }
  ++held;
  ++counts_->total;
  return Slot(counts_, uid);
}

uint32_t UidSlots::used() const {
  absl::MutexLock lock(&counts_->mu);
  return counts_->total;
}

uint32_t UidSlots::used_by(uid_t uid) const {
  absl::MutexLock lock(&counts_->mu);
  auto it = counts_->per_uid.find(uid);
  return it == counts_->per_uid.end() ? 0 : it->second;
}

}  // namespace kvstream
