// UringQueue (io/uring_queue.h): one real io_uring ring on real files. Reads and writes come out of
// Reap whole or with a typed reason; a short read is resubmitted for the rest (a pipe gives one
// deterministically); the end of a file is kEndOfFile; a cancelled read still completes, as
// failed; the ring holds no more than its depth; the destructor waits for what is in flight.
// Skipped (exit code 77) where the kernel has no io_uring.
#include "io/uring_queue.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "io_queue_util.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

using namespace std::chrono_literals;

void InitOrSkip(UringQueue& queue, uint32_t depth, int event_fd = -1) {
  const absl::Status s = queue.Init({.depth = depth, .event_fd = event_fd});
  if (absl::IsUnavailable(s)) {
    std::cerr << "SKIPPED: " << s << " (io_uring is unavailable on this kernel)\n";
    std::exit(kSkipExitCode);
  }
  REQUIRE(s.ok());
}

struct Pipe {
  int read_end = -1, write_end = -1;
  Pipe() {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    read_end = fds[0], write_end = fds[1];
  }
  ~Pipe() { close(read_end), close(write_end); }
  void Write(const uint8_t* data, size_t size) { REQUIRE(write(write_end, data, size) == static_cast<ssize_t>(size)); }
};

// A file of its own in a fresh directory, opened with `flags`.
struct File {
  TempDir dir;
  int fd;
  explicit File(int flags = O_RDWR) : fd(open(dir.sub("f").c_str(), flags | O_CREAT | O_CLOEXEC, 0600)) {
    REQUIRE(fd >= 0);
  }
  ~File() { close(fd); }
};

// Queues every request, submits them and reaps their completions.
std::vector<IoCompletion> Run(UringQueue& queue, const std::vector<IoRequest*>& requests) {
  for (IoRequest* r : requests) REQUIRE(queue.Queue(r));
  queue.Submit();
  return ReapAll(queue, requests.size());
}

TEST_CASE("writes and reads on a file come out whole, each with its own request") {
  File file;
  UringQueue queue;
  InitOrSkip(queue, 4);
  const uint32_t lengths[4] = {65536, 4096, 12345, 1};
  std::vector<std::vector<uint8_t>> data, back;
  IoRequest writes[4], reads[4];
  for (uint64_t i = 0, offset = 0; i < 4; offset += lengths[i++]) {
    data.push_back(Payload(lengths[i], i));
    back.emplace_back(lengths[i], 0);
    writes[i].Set(IoKind::kWrite, file.fd, offset, lengths[i], data[i].data());
    reads[i].Set(IoKind::kRead, file.fd, offset, lengths[i], back[i].data());
  }
  for (const IoCompletion& c : Run(queue, {&writes[0], &writes[1], &writes[2], &writes[3]})) {
    CHECK(c.status == IoStatus::kOk);
    CHECK(c.request->transferred == c.request->length);
  }
  IoRequest sync;
  sync.Set(IoKind::kSync, file.fd, 0, 0, nullptr);
  CHECK(Run(queue, {&sync})[0].status == IoStatus::kOk);
  for (const IoCompletion& c : Run(queue, {&reads[0], &reads[1], &reads[2], &reads[3]})) {
    CHECK(c.status == IoStatus::kOk);
  }
  CHECK(back == data);
  CHECK(queue.in_flight() == 0);
}

TEST_CASE("the ring takes no more requests than its depth until some are reaped") {
  File file;
  UringQueue queue;
  InitOrSkip(queue, 2);
  std::vector<uint8_t> buffer(4096, 7);
  IoRequest r[3];
  for (IoRequest& x : r) x.Set(IoKind::kWrite, file.fd, 0, 4096, buffer.data());
  CHECK(queue.Queue(&r[0]));
  CHECK(queue.Queue(&r[1]));
  CHECK_FALSE(queue.Queue(&r[2]));
  CHECK(queue.in_flight() == 2);
  queue.Submit();
  ReapAll(queue, 2);
  CHECK(queue.in_flight() == 0);
  Run(queue, {&r[2]});
}

TEST_CASE("a short read is resubmitted for the rest and comes out whole") {
  Pipe pipe;
  UringQueue queue;
  InitOrSkip(queue, 2);
  const auto data = Payload(8192, 9);
  std::vector<uint8_t> buffer(8192, 0);
  IoRequest req;
  req.Set(IoKind::kRead, pipe.read_end, 0, 8192, buffer.data());
  pipe.Write(data.data(), 4096);  // half of it is there
  REQUIRE(queue.Queue(&req));
  queue.Submit();
  std::vector<IoCompletion> out;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (queue.resubmits() == 0) {  // the first half landed: the rest is asked for again
    queue.Reap(&out);
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(1ms);
  }
  CHECK(out.empty());  // a short read never comes out of Reap
  CHECK(req.transferred == 4096);
  pipe.Write(data.data() + 4096, 4096);
  const std::vector<IoCompletion> done = ReapAll(queue, 1);
  CHECK(done[0].request == &req);
  CHECK(done[0].status == IoStatus::kOk);
  CHECK(req.transferred == 8192);
  CHECK(buffer == data);
  CHECK(queue.resubmits() == 1);
}

TEST_CASE("a read cut short by the end of its file is resubmitted, then reports the end") {
  File file;
  const auto data = Payload(6000, 3);
  REQUIRE(write(file.fd, data.data(), data.size()) == 6000);
  UringQueue queue;
  InitOrSkip(queue, 1);
  std::vector<uint8_t> buffer(8192, 0);
  IoRequest req;
  req.Set(IoKind::kRead, file.fd, 0, 8192, buffer.data());
  const IoCompletion c = Run(queue, {&req})[0];
  CHECK(c.status == IoStatus::kEndOfFile);  // a torn copy, never a partial success
  CHECK(c.error == ENODATA);
  CHECK(req.transferred == 6000);
  CHECK(queue.resubmits() >= 1);
  CHECK(std::equal(data.begin(), data.end(), buffer.begin()));
}

TEST_CASE("a failed read comes out with its errno") {
  File file(O_WRONLY);
  UringQueue queue;
  InitOrSkip(queue, 1);
  std::vector<uint8_t> buffer(4096);
  IoRequest req;
  req.Set(IoKind::kRead, file.fd, 0, 4096, buffer.data());
  const IoCompletion c = Run(queue, {&req})[0];
  CHECK(c.status == IoStatus::kFailed);
  CHECK(c.error == EBADF);
}

TEST_CASE("a cancelled read still completes, as failed, and its buffer gets nothing afterwards") {
  Pipe pipe;  // empty: the read waits
  UringQueue queue;
  InitOrSkip(queue, 1);
  std::vector<uint8_t> buffer(4096, 0);
  IoRequest req;
  req.Set(IoKind::kRead, pipe.read_end, 0, 4096, buffer.data());
  REQUIRE(queue.Queue(&req));
  queue.Submit();
  std::vector<IoCompletion> out;
  queue.Reap(&out);
  REQUIRE(out.empty());
  queue.Cancel(&req);
  CHECK(req.abandoned);
  queue.Submit();
  out = ReapAll(queue, 1);
  CHECK(out[0].request == &req);
  CHECK(out[0].status == IoStatus::kFailed);
  CHECK(out[0].error == ECANCELED);
  CHECK(queue.in_flight() == 0);
  const auto data = Payload(4096, 5);
  pipe.Write(data.data(), data.size());
  std::this_thread::sleep_for(20ms);
  out.clear();
  queue.Reap(&out);
  CHECK(out.empty());  // the cancel's own completion never comes out either
  CHECK(buffer == std::vector<uint8_t>(4096, 0));
  std::vector<uint8_t> left(4096);
  CHECK(read(pipe.read_end, left.data(), left.size()) == 4096);  // still in the pipe
}

TEST_CASE("completions signal the event fd") {
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(efd >= 0);
  UringQueue queue;
  InitOrSkip(queue, 1, efd);
  uint64_t n = 0;
  CHECK(read(efd, &n, sizeof n) < 0);  // nothing yet
  File file;
  std::vector<uint8_t> buffer(512, 1);
  IoRequest req;
  req.Set(IoKind::kWrite, file.fd, 0, 512, buffer.data());
  Run(queue, {&req});
  CHECK(read(efd, &n, sizeof n) == sizeof n);
  CHECK(n >= 1);
  close(efd);
}

TEST_CASE("the destructor waits for the reads still in flight") {
  Pipe pipe;
  const auto data = Payload(4096, 8);
  std::vector<uint8_t> buffer(4096, 0);  // outlives the queue
  auto queue = std::make_unique<UringQueue>();
  InitOrSkip(*queue, 1);
  IoRequest req;
  req.Set(IoKind::kRead, pipe.read_end, 0, 4096, buffer.data());
  REQUIRE(queue->Queue(&req));
  queue->Submit();
  ssize_t written = 0;
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    written = write(pipe.write_end, data.data(), data.size());  // no Catch2 assertion off the main thread
  });
  const auto start = std::chrono::steady_clock::now();
  queue.reset();
  const auto waited = std::chrono::steady_clock::now() - start;
  writer.join();
  REQUIRE(written == 4096);
  CHECK(waited >= 80ms);
  CHECK(buffer == data);  // landed before the buffer could be freed
}

TEST_CASE("the destructor waits for the other reads in flight after a cancel") {
  // A Cancel's own completion is not a request's: counted as one, it let the destructor return
  // while the other read could still land in a buffer its owner then frees.
  Pipe cancelled, pending;
  const auto data = Payload(4096, 9);
  std::vector<uint8_t> a(4096, 0), b(4096, 0);  // outlive the queue
  auto queue = std::make_unique<UringQueue>();
  InitOrSkip(*queue, 2);
  IoRequest ra, rb;
  ra.Set(IoKind::kRead, cancelled.read_end, 0, 4096, a.data());
  rb.Set(IoKind::kRead, pending.read_end, 0, 4096, b.data());
  REQUIRE(queue->Queue(&ra));
  REQUIRE(queue->Queue(&rb));
  queue->Submit();
  queue->Cancel(&ra);
  ssize_t written = 0;
  std::thread writer([&] {
    std::this_thread::sleep_for(150ms);
    written = write(pending.write_end, data.data(), data.size());
  });
  const auto start = std::chrono::steady_clock::now();
  queue.reset();
  const auto waited = std::chrono::steady_clock::now() - start;
  writer.join();
  REQUIRE(written == 4096);
  CHECK(waited >= 120ms);
  CHECK(b == data);
}

}  // namespace
}  // namespace kvstream::testing
