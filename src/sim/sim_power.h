// SimPower: the power supply of the SimDevices that share it, for power-cut tests. It counts every
// operation of those devices (data and control, in the order they are issued) and fails, for all
// of them at once, just before a chosen one: from then on nothing more reaches their media
// (SimDevice::Medium), though the devices go on serving the store that does not know yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>

namespace kvstream {

class SimPower {
 public:
  // The power fails just before the operation numbered `op` (from 0, over every device sharing
  // it) is issued.
  void CutAtOp(uint64_t op) { cut_at_.store(op); }
  bool off() const { return off_.load(); }
  // Operations issued so far.
  uint64_t ops() const { return ops_.load(); }

  // Called by each device as it issues an operation.
  void CountOp() {
    if (ops_.fetch_add(1) == cut_at_.load()) off_.store(true);
  }

 private:
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> cut_at_{std::numeric_limits<uint64_t>::max()};
  std::atomic<bool> off_{false};
};

}  // namespace kvstream
