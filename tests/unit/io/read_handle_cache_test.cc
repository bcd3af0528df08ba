// ReadHandleCache (io/read_handle_cache.h): the chunk files a tier keeps open for reads. Idle
// handles are bounded (least recently used closed first); a handle with reads in flight is never
// closed until the last of them lands, even when dropped. Descriptors are real (/dev/null), and
// whether one is still open is asked of the kernel (fcntl F_GETFD). Every descriptor a case uses is
// opened before anything is closed, so a closed number is never reused within a case.
#include "io/read_handle_cache.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <memory>

namespace kvstream::testing {
namespace {

int OpenFd() {
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

ReadHandleCache::Handle HandleOf(int fd, int64_t checked_ns = 0) { return {fd, checked_ns, {}}; }

TEST_CASE("idle handles past the bound are closed, least recently used first") {
  const int a = OpenFd(), b = OpenFd(), c = OpenFd();
  ReadHandleCache cache(2);
  cache.Insert("a", HandleOf(a));
  cache.Insert("b", HandleOf(b));
  REQUIRE(cache.Find("a") != nullptr);  // a is now the most recently used
  cache.Insert("c", HandleOf(c));       // three idle: b, the oldest, goes
  CHECK(IsOpen(a));
  CHECK_FALSE(IsOpen(b));
  CHECK(IsOpen(c));
  CHECK(cache.Find("b") == nullptr);
  CHECK(cache.ByFd(b) == nullptr);
  REQUIRE(cache.Find("a") != nullptr);
  CHECK(cache.Find("a")->fd == a);
  CHECK(cache.ByFd(c)->fd == c);
}

TEST_CASE("a handle's fields are kept, and Find gives the cached handle itself") {
  const int a = OpenFd();
  ReadHandleCache cache(4);
  cache.Insert("a", HandleOf(a, 42));
  ReadHandleCache::Handle* h = cache.Find("a");
  REQUIRE(h != nullptr);
  CHECK(h->checked_ns == 42);
  h->checked_ns = 77;  // the device revalidates a handle in place
  CHECK(cache.ByFd(a)->checked_ns == 77);
  CHECK(cache.Find("missing") == nullptr);
  CHECK(cache.ByFd(a + 1000) == nullptr);
}

TEST_CASE("a handle with reads in flight is never closed by the bound, and is idle again once they land") {
  const int a = OpenFd(), b = OpenFd(), c = OpenFd();
  ReadHandleCache cache(1);
  cache.Insert("a", HandleOf(a));
  cache.ReadIssued(a);
  cache.ReadIssued(a);
  cache.Insert("b", HandleOf(b));
  cache.Insert("c", HandleOf(c));  // idle: b and c; b goes, a is busy
  CHECK(IsOpen(a));
  CHECK_FALSE(IsOpen(b));
  CHECK(IsOpen(c));
  cache.ReadLanded(a);
  CHECK(IsOpen(a));  // one read still in flight
  CHECK(IsOpen(c));
  cache.ReadLanded(a);  // idle again, and the most recently used: c goes
  CHECK(IsOpen(a));
  CHECK_FALSE(IsOpen(c));
  CHECK(cache.Find("a") != nullptr);
}

TEST_CASE("dropping an idle handle closes it at once, and dropping an unknown stem does nothing") {
  const int a = OpenFd(), b = OpenFd();
  ReadHandleCache cache(4);
  cache.Insert("a", HandleOf(a));
  cache.Insert("b", HandleOf(b));
  cache.Drop("nothing");
  cache.Drop("a");
  CHECK_FALSE(IsOpen(a));
  CHECK(cache.Find("a") == nullptr);
  CHECK(cache.ByFd(a) == nullptr);
  CHECK(IsOpen(b));
}

TEST_CASE("a handle dropped with reads in flight is closed only when the last of them lands") {
  const int a = OpenFd(), b = OpenFd();
  ReadHandleCache cache(1);
  cache.Insert("a", HandleOf(a));
  cache.ReadIssued(a);
  cache.ReadIssued(a);
  cache.Drop("a");
  CHECK(IsOpen(a));  // the kernel still reads it
  CHECK(cache.Find("a") == nullptr);
  CHECK(cache.ByFd(a) == nullptr);
  cache.ReadIssued(a);  // one more read queued on the handle it was given before the drop
  cache.Insert("b", HandleOf(b));  // the bound counts idle handles of the cache only
  cache.ReadLanded(a);
  cache.ReadLanded(a);
  CHECK(IsOpen(a));
  cache.ReadLanded(a);
  CHECK_FALSE(IsOpen(a));
  CHECK(IsOpen(b));
}

TEST_CASE("DropAll closes idle handles now and busy ones as their reads land") {
  const int idle = OpenFd(), busy = OpenFd();
  ReadHandleCache cache(4);
  cache.Insert("idle", HandleOf(idle));
  cache.Insert("busy", HandleOf(busy));
  cache.ReadIssued(busy);
  cache.DropAll();
  CHECK_FALSE(IsOpen(idle));
  CHECK(IsOpen(busy));
  CHECK(cache.Find("idle") == nullptr);
  CHECK(cache.Find("busy") == nullptr);
  CHECK(cache.ByFd(busy) == nullptr);
  cache.ReadLanded(busy);
  CHECK_FALSE(IsOpen(busy));
}

TEST_CASE("the cache closes every handle it holds when destroyed, dropped ones still in flight included") {
  const int idle = OpenFd(), busy = OpenFd(), dropped = OpenFd();
  auto cache = std::make_unique<ReadHandleCache>(4);
  cache->Insert("idle", HandleOf(idle));
  cache->Insert("busy", HandleOf(busy));
  cache->Insert("dropped", HandleOf(dropped));
  cache->ReadIssued(busy);
  cache->ReadIssued(dropped);
  cache->Drop("dropped");
  cache.reset();  // the device's rings have no reads in flight by then
  CHECK_FALSE(IsOpen(idle));
  CHECK_FALSE(IsOpen(busy));
  CHECK_FALSE(IsOpen(dropped));
}

}  // namespace
}  // namespace kvstream::testing
