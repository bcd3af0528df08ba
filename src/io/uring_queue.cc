#include "io/uring_queue.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {

absl::Status UringQueue::Init(const Options& options) {
  // Each request needs one SQE at a time (resubmits reuse it), so `depth` entries suffice.
  io_uring_params params{};
  params.flags = IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(options.depth, &ring_, &params);
  if (rc == -EINVAL) {  // kernels before 5.19
    params = {};
    rc = io_uring_queue_init_params(options.depth, &ring_, &params);
  }
  if (rc < 0) return absl::UnavailableError(absl::StrCat("io_uring_queue_init: ", std::strerror(-rc)));
  initialized_ = true;
  depth_ = options.depth;
  never_inline_ = options.never_inline;
  if (options.event_fd >= 0) {
    rc = io_uring_register_eventfd(&ring_, options.event_fd);
    if (rc < 0) return absl::InternalError(absl::StrCat("io_uring_register_eventfd: ", std::strerror(-rc)));
  }
  if (options.io_workers > 0) {
    // Kernels since 5.15. The limit reaches the threads using the ring now and those that start
    // using io_uring on it later; a thread's io-wq is shared by all its rings, which is why every
    // ring gets the same value.
    unsigned workers[2] = {options.io_workers, 0};  // bounded (file I/O), unbounded unchanged
    rc = io_uring_register_iowq_max_workers(&ring_, workers);
    if (rc < 0 && rc != -EINVAL) {  // not fatal: the kernel's default still works
      spdlog::warn("io_uring_register_iowq_max_workers: {}", std::strerror(-rc));
    }
  }
  return absl::OkStatus();
}

UringQueue::~UringQueue() {
  if (!initialized_) return;
  if (unsubmitted_ > 0) io_uring_submit(&ring_);
  while (in_flight_ > 0) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
    const bool request = io_uring_cqe_get_data(cqe) != nullptr;  // not a Cancel's own completion
    io_uring_cqe_seen(&ring_, cqe);
    if (request) --in_flight_;
  }
  io_uring_queue_exit(&ring_);
}

void UringQueue::Prepare(IoRequest* r) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // the SQ holds `depth` entries: flush and retry once
    io_uring_submit(&ring_);
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(&ring_);
  }
  auto* buf = static_cast<uint8_t*>(r->buffer) + r->transferred;
  const uint32_t remaining = r->length - r->transferred;
  const uint64_t offset = r->offset + r->transferred;
  switch (r->kind) {
    case IoKind::kRead:
      if (r->region >= 0) {
        io_uring_prep_read_fixed(sqe, r->file, buf, remaining, offset, r->region);
      } else {
        io_uring_prep_read(sqe, r->file, buf, remaining, offset);
      }
      break;
    case IoKind::kWrite:
      if (r->region >= 0) {
        io_uring_prep_write_fixed(sqe, r->file, buf, remaining, offset, r->region);
      } else {
        io_uring_prep_write(sqe, r->file, buf, remaining, offset);
      }
      break;
    case IoKind::kSync: io_uring_prep_fsync(sqe, r->file, IORING_FSYNC_DATASYNC); break;
    case IoKind::kCommit: io_uring_prep_nop(sqe); break;  // never queued: files commit with CommitTemp
  }
  if (never_inline_) io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
  io_uring_sqe_set_data(sqe, r);
  ++unsubmitted_;
}

bool UringQueue::Queue(IoRequest* request) {
  if (in_flight_ == depth_) return false;
  ++in_flight_;
  Prepare(request);
  return true;
}

void UringQueue::Cancel(IoRequest* request) {
  request->abandoned = true;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return;  // best effort
  }
  io_uring_prep_cancel(sqe, request, 0);
  io_uring_sqe_set_data(sqe, nullptr);  // its own completion is skipped by Reap
  ++unsubmitted_;
}

void UringQueue::Submit() {
  if (unsubmitted_ == 0) return;
  io_uring_submit(&ring_);
  unsubmitted_ = 0;
}

void UringQueue::Reap(std::vector<IoCompletion>* out) {
  io_uring_cqe* cqe;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
    auto* request = static_cast<IoRequest*>(io_uring_cqe_get_data(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (request == nullptr) continue;  // a Cancel's own completion
    IoCompletion done;
    if (AdvanceTransfer(request, result, &done) == TransferStep::kResubmit) {
      resubmits_.fetch_add(1, std::memory_order_relaxed);
      Prepare(request);
      continue;
    }
    --in_flight_;
    out->push_back(done);
  }
  Submit();  // the resubmissions
}

int UringQueue::RegisterSparseBuffers(unsigned count) { return io_uring_register_buffers_sparse(&ring_, count); }

int UringQueue::UpdateBuffer(unsigned slot, const iovec& iov) {
  iovec copy = iov;
  return io_uring_register_buffers_update_tag(&ring_, slot, &copy, nullptr, 1);
}

}  // namespace kvstream
