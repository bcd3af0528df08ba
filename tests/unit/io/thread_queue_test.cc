// ThreadQueue (io/thread_queue.h): the engine without io_uring, on real files, held to UringQueue's
// contract: reads, writes and syncs come out of Reap whole or with a typed reason, a short read is
// continued for the rest and the end of a file is kEndOfFile, an abandoned request is not
// continued, the queue holds no more than its depth, completions signal the event fd, and the
// destructor waits for what is in flight.
#include "io/thread_queue.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "io_queue_util.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

using namespace std::chrono_literals;

struct File {
  TempDir dir;
  int fd;
  File() : fd(open(dir.sub("f").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) { REQUIRE(fd >= 0); }
  ~File() { close(fd); }
  off_t size() const {
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0);
    return st.st_size;
  }
};

TEST_CASE("threads: writes, a sync and reads on a file come out whole, each with its own request") {
  File file;
  ThreadQueue queue;
  REQUIRE(queue.Init({.depth = 4}).ok());
  const auto a = Payload(64 << 10, 1), b = Payload(64 << 10, 2);
  IoRequest wa, wb, sync;
  wa.Set(IoKind::kWrite, file.fd, 0, a.size(), const_cast<uint8_t*>(a.data()));
  wb.Set(IoKind::kWrite, file.fd, a.size(), b.size(), const_cast<uint8_t*>(b.data()));
  REQUIRE(queue.Queue(&wa));
  REQUIRE(queue.Queue(&wb));
  queue.Submit();
  for (const IoCompletion& c : ReapAll(queue, 2)) CHECK(c.status == IoStatus::kOk);
  sync.Set(IoKind::kSync, file.fd, 0, 0, nullptr);
  REQUIRE(queue.Queue(&sync));
  queue.Submit();
  CHECK(ReapAll(queue, 1)[0].status == IoStatus::kOk);

  std::vector<uint8_t> ra(a.size()), rb(b.size());
  IoRequest first, second;
  first.Set(IoKind::kRead, file.fd, 0, ra.size(), ra.data());
  second.Set(IoKind::kRead, file.fd, a.size(), rb.size(), rb.data());
  REQUIRE(queue.Queue(&second));
  REQUIRE(queue.Queue(&first));
  queue.Submit();
  std::vector<IoCompletion> done = ReapAll(queue, 2);
  CHECK(((done[0].request == &first && done[1].request == &second) ||
         (done[0].request == &second && done[1].request == &first)));
  for (const IoCompletion& c : done) CHECK(c.status == IoStatus::kOk);
  CHECK(ra == a);
  CHECK(rb == b);
  CHECK(queue.in_flight() == 0);
}

TEST_CASE("threads: the queue takes no more requests than its depth until some are reaped") {
  File file;
  ThreadQueue queue;
  REQUIRE(queue.Init({.depth = 2}).ok());
  std::vector<uint8_t> buf(3 * 4096);
  IoRequest r[3];
  for (int i = 0; i < 3; ++i) r[i].Set(IoKind::kWrite, file.fd, i * 4096, 4096, buf.data() + i * 4096);
  CHECK(queue.Queue(&r[0]));
  CHECK(queue.Queue(&r[1]));
  CHECK_FALSE(queue.Queue(&r[2]));
  queue.Submit();
  ReapAll(queue, 2);
  CHECK(queue.Queue(&r[2]));
  queue.Submit();
  ReapAll(queue, 1);
}

TEST_CASE("threads: a read cut short by the end of its file is continued, then reports the end") {
  File file;
  const auto data = Payload(6000, 3);
  REQUIRE(pwrite(file.fd, data.data(), data.size(), 0) == 6000);
  ThreadQueue queue;
  REQUIRE(queue.Init({.depth = 1}).ok());
  std::vector<uint8_t> buf(8192, 0);
  IoRequest r;
  r.Set(IoKind::kRead, file.fd, 0, buf.size(), buf.data());
  REQUIRE(queue.Queue(&r));
  queue.Submit();
  const IoCompletion c = ReapAll(queue, 1)[0];
  CHECK(c.status == IoStatus::kEndOfFile);
  CHECK(r.transferred == 6000);
  CHECK(queue.resubmits() == 1);  // the short read went on for the rest, which was the end
  CHECK(std::vector<uint8_t>(buf.begin(), buf.begin() + 6000) == data);
}

TEST_CASE("threads: an abandoned request is not continued after its call") {
  File file;
  const auto data = Payload(6000, 4);
  REQUIRE(pwrite(file.fd, data.data(), data.size(), 0) == 6000);
  ThreadQueue queue;
  REQUIRE(queue.Init({.depth = 1}).ok());
  std::vector<uint8_t> buf(8192, 0);
  IoRequest r;
  r.Set(IoKind::kRead, file.fd, 0, buf.size(), buf.data());
  REQUIRE(queue.Queue(&r));
  queue.Cancel(&r);
  queue.Submit();
  const IoCompletion c = ReapAll(queue, 1)[0];
  CHECK(c.status != IoStatus::kOk);
  CHECK(queue.resubmits() == 0);
}

TEST_CASE("threads: a failed call comes out with its errno") {
  ThreadQueue queue;
  REQUIRE(queue.Init({.depth = 1}).ok());
  std::vector<uint8_t> buf(4096);
  IoRequest r;
  r.Set(IoKind::kRead, -1, 0, buf.size(), buf.data());
  REQUIRE(queue.Queue(&r));
  queue.Submit();
  const IoCompletion c = ReapAll(queue, 1)[0];
  CHECK(c.status == IoStatus::kFailed);
  CHECK(c.error == EBADF);
}

TEST_CASE("threads: completions signal the event fd") {
  File file;
  const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(efd >= 0);
  {
    ThreadQueue queue;
    REQUIRE(queue.Init({.depth = 1, .event_fd = efd}).ok());
    std::vector<uint8_t> buf(4096, 7);
    IoRequest r;
    r.Set(IoKind::kWrite, file.fd, 0, buf.size(), buf.data());
    REQUIRE(queue.Queue(&r));
    queue.Submit();
    pollfd p{efd, POLLIN, 0};
    CHECK(poll(&p, 1, 10'000) == 1);
    ReapAll(queue, 1);
  }
  close(efd);
}

TEST_CASE("threads: the destructor waits for the requests still in flight") {
  File file;
  const auto data = Payload(32 << 20, 5);
  auto queue = std::make_unique<ThreadQueue>();
  REQUIRE(queue->Init({.depth = 4}).ok());
  constexpr size_t kPiece = 8 << 20;
  IoRequest r[4];
  for (size_t i = 0; i < 4; ++i) {
    r[i].Set(IoKind::kWrite, file.fd, i * kPiece, kPiece, const_cast<uint8_t*>(data.data()) + i * kPiece);
    REQUIRE(queue->Queue(&r[i]));
  }
  queue.reset();  // not even submitted: the destructor hands them over and waits
  CHECK(file.size() == static_cast<off_t>(data.size()));
  std::vector<uint8_t> back(data.size());
  REQUIRE(pread(file.fd, back.data(), back.size(), 0) == static_cast<ssize_t>(back.size()));
  CHECK(back == data);
}

}  // namespace
}  // namespace kvstream::testing
