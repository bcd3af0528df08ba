// BlockingCallThread (io/blocking_call_thread.h): a tier's file-system calls off the loop. A call
// that answers within the wait is as if made in place; one that hangs (here: waits on a
// notification, as a call on a frozen file system waits on its servers) costs its caller the wait
// once, then every call fails at once, a call that must happen is queued, and the late call's
// result is undone when it returns.
#include "io/blocking_call_thread.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>

#include "absl/synchronization/notification.h"
#include "io/tier_device.h"

namespace kvstream::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kWaitNs = 50'000'000;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST_CASE("a call that answers in time returns its result, as if made in place") {
  BlockingCallThread calls("/sim/t0", kWaitNs);
  absl::StatusOr<int> r = calls.Run<int>("adding", [] { return absl::StatusOr<int>(42); });
  REQUIRE(r.ok());
  CHECK(*r == 42);
  CHECK(absl::IsNotFound(calls.Run("failing", [] { return absl::NotFoundError("gone"); })));
  CHECK(calls.HungNs() == 0);
}

TEST_CASE("a hung call costs the wait once, then calls fail at once, a must-run call waits, the late result is undone") {
  absl::Notification frozen_until;
  std::atomic<bool> undone{false}, published{false}, tried{false};
  {
    BlockingCallThread calls("/sim/pfs", kWaitNs);
    auto start = Clock::now();
    absl::StatusOr<int> opened = calls.Run<int>(
        "opening a chunk file",
        [&] {
          frozen_until.WaitForNotification();
          return absl::StatusOr<int>(7);
        },
        [&](absl::StatusOr<int>& late) { undone = late.ok() && *late == 7; });
    CHECK(NotAnswering(opened.status()));
    CHECK(MsSince(start) >= 45);
    CHECK(MsSince(start) < 1000);
    CHECK(calls.HungCall() == "opening a chunk file");

    start = Clock::now();
    const absl::Status check = calls.Run("checking the tier directory", [&] {
      tried = true;
      return absl::OkStatus();
    });
    CHECK(NotAnswering(check));
    CHECK(MsSince(start) < 20);  // no wait behind a hung call
    CHECK_THAT(std::string(check.message()), Catch::Contains("opening a chunk file has waited"));
    CHECK(NotAnswering(calls.RunAlways("publishing a chunk", [&] {
      published = true;
      return absl::OkStatus();
    })));
    CHECK(calls.HungNs() >= kWaitNs);

    frozen_until.Notify();  // the file system answers again
    for (int i = 0; i < 200 && !published; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(published);    // queued behind the hung call, run once it returned
    CHECK_FALSE(tried);  // dropped: it would have been stale
    CHECK(undone);       // the late open's descriptor is nobody's: closed
    CHECK(calls.HungNs() == 0);
    absl::StatusOr<int> again = calls.Run<int>("adding", [] { return absl::StatusOr<int>(1); });
    CHECK(again.ok());
  }
}

TEST_CASE("destroyed while a call hangs: the thread finishes it on its own") {
  auto frozen_until = std::make_shared<absl::Notification>();
  auto returned = std::make_shared<std::atomic<bool>>(false);
  {
    BlockingCallThread calls("/sim/pfs", kWaitNs);
    CHECK(NotAnswering(calls.Run("checking the tier directory", [frozen_until, returned] {
      frozen_until->WaitForNotification();
      *returned = true;
      return absl::OkStatus();
    })));
  }  // does not wait for the hung call
  frozen_until->Notify();
  for (int i = 0; i < 200 && !*returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(*returned);
}

TEST_CASE("destroyed right after its caller stopped waiting: the thread finishes the call on its own") {
  // The call was waited for 1 ms, far less than the thread's own wait: it is not hung by that
  // measure, and may not even have started when the thread is destroyed.
  auto frozen_until = std::make_shared<absl::Notification>();
  auto returned = std::make_shared<std::atomic<bool>>(false);
  {
    BlockingCallThread calls("/sim/pfs", int64_t{10'000'000'000});
    CHECK(NotAnswering(calls.Run(
        "checking the tier directory",
        [frozen_until, returned] {
          frozen_until->WaitForNotification();
          *returned = true;
          return absl::OkStatus();
        },
        /*wait_ns=*/1'000'000)));
  }  // does not wait for the call
  frozen_until->Notify();
  for (int i = 0; i < 200 && !*returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(*returned);
}


}  // namespace
}  // namespace kvstream::testing
