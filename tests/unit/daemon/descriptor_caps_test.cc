// Bounded resources per uid (daemon/uid_slots.h, descriptor_caps.h): slots refused past the total
// and past one uid's share, given back on every path; the caps sized so that every kind at its
// cap fits in the descriptors left, whatever the limit.
#include "descriptor_caps.h"

#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <optional>
#include <utility>
#include <vector>

#include "uid_slots.h"

namespace kvstream::testing {
namespace {

TEST_CASE("slots are refused past one uid's share and past the total, and come back when released") {
  UidSlots slots("test slots", {5, 2});
  std::vector<UidSlots::Slot> held;
  for (uid_t uid : {1, 1}) {
    auto s = slots.Take(uid);
    REQUIRE(s.ok());
    held.push_back(*std::move(s));
  }
  auto third = slots.Take(1);
  REQUIRE_FALSE(third.ok());
  CHECK(absl::IsResourceExhausted(third.status()));
  CHECK(third.status().message() == "uid 1 holds 2 test slots, the most one uid may (5 in all)");
  for (uid_t uid : {2, 2, 3}) {  // other uids still get theirs
    auto s = slots.Take(uid);
    REQUIRE(s.ok());
    held.push_back(*std::move(s));
  }
  auto full = slots.Take(4);
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().message() == "all 5 test slots are taken");
  CHECK(slots.used() == 5);
  CHECK(slots.used_by(4) == 0);  // a refusal takes nothing

  held.erase(held.begin());  // uid 1 gives one back
  CHECK(slots.used() == 4);
  CHECK(slots.used_by(1) == 1);
  UidSlots::Slot moved = std::move(held.front());  // moving hands it over, never gives it back twice
  held.erase(held.begin());
  CHECK(slots.used_by(1) == 1);
  moved.reset();
  moved.reset();
  CHECK(slots.used_by(1) == 0);
  CHECK(slots.Take(1).ok());
}

TEST_CASE("a slot outlives its UidSlots") {
  std::optional<UidSlots> slots(std::in_place, "test slots", UidSlots::Limits{1, 1});
  auto s = slots->Take(7);
  REQUIRE(s.ok());
  slots.reset();
  s->reset();  // gives back into counts that are still alive
}

TEST_CASE("every kind at its cap fits in the descriptors left, from a small limit to a large one") {
  for (uint64_t left : {4'096ull, 10'000ull, 60'000ull, 1'000'000ull, 100'000'000ull}) {
    INFO(left << " descriptors left");
    const DescriptorCaps caps = SizeDescriptorCaps(left);
    CHECK(DescriptorsAtCaps(caps) <= left);
    for (const UidSlots::Limits& l : {caps.connections, caps.identities, caps.pending, caps.queued, caps.regions}) {
      CHECK(l.per_uid >= 1);
      CHECK(l.per_uid <= l.total / 4);  // one uid never holds more than a quarter of a kind
    }
  }
  // With the limits containers and systemd units commonly set (65536 and up), every uid gets far
  // more than one client needs (a connection and an identity per process) and pending requests
  // keep the 256 they always had.
  const DescriptorCaps usual = SizeDescriptorCaps(60'000);
  CHECK(usual.connections.per_uid >= 2048);
  CHECK(usual.identities.per_uid >= 1024);
  CHECK(usual.pending.total == 256);
  CHECK(usual.pending.per_uid == 64);
  // Every count from 250 left up fits; below that the floors hold (the daemon warns at start).
  uint64_t first_misfit = 0;
  for (uint64_t left = 250; left <= 1'000'000 && first_misfit == 0; ++left) {
    if (DescriptorsAtCaps(SizeDescriptorCaps(left)) > left) first_misfit = left;
  }
  CHECK(first_misfit == 0);
  const DescriptorCaps starved = SizeDescriptorCaps(0);
  CHECK(starved.connections.total == 16);
  CHECK(starved.pending.per_uid >= 1);
}

TEST_CASE("the soft descriptor limit is raised to the hard one") {
  rlimit before{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &before) == 0);
  rlimit lowered = before;
  lowered.rlim_cur = std::min<rlim_t>(before.rlim_max, 512);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  const uint64_t now = RaiseDescriptorLimit();
  rlimit after{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &after) == 0);
  CHECK(after.rlim_cur == before.rlim_max);
  CHECK((before.rlim_max == RLIM_INFINITY || now == before.rlim_max));
  CHECK(OpenDescriptors() >= 3);  // stdin, stdout, stderr at least
  setrlimit(RLIMIT_NOFILE, &before);
}

}  // namespace
}  // namespace kvstream::testing
