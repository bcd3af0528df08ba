// UidSlots: slots of one kind (control socket connections, pending data socket requests, client
// regions...) bounded in total and per uid, so that no uid can take the slots every other one
// needs. A slot is held by a UidSlots::Slot and given back when that is destroyed, on every path.
// Thread-safe; a Slot may outlive its UidSlots.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvstream {

class UidSlots {
  struct Counts {
    absl::Mutex mu;
    uint32_t total ABSL_GUARDED_BY(mu) = 0;
    absl::flat_hash_map<uid_t, uint32_t> per_uid ABSL_GUARDED_BY(mu);
  };

 public:
  struct Limits {
    uint32_t total = 0;    // slots of every uid together
    uint32_t per_uid = 0;  // slots of one uid
  };

  // A slot taken (or none: default-constructed, moved from); given back when destroyed or reset.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept = default;
    Slot& operator=(Slot&& other) noexcept;
    ~Slot() { reset(); }
    void reset();
    explicit operator bool() const { return counts_ != nullptr; }

   private:
    friend class UidSlots;
    Slot(std::shared_ptr<Counts> counts, uid_t uid) : counts_(std::move(counts)), uid_(uid) {}
    std::shared_ptr<Counts> counts_;
    uid_t uid_ = 0;
  };

  // `what` names the slots in refusals ("pending data socket connections").
  UidSlots(std::string what, Limits limits);

  // A slot for `uid`; ResourceExhausted, saying which limit, when every slot or every one `uid`
  // may hold is taken.
  absl::StatusOr<Slot> Take(uid_t uid);
  uint32_t used() const;
  uint32_t used_by(uid_t uid) const;

 private:
  const std::string what_;
  const Limits limits_;
  const std::shared_ptr<Counts> counts_;
};

}  // namespace kvstream
