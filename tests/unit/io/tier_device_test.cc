// The device contract shared by FileDevice and SimDevice: typed outcomes for errnos and how a
// partial transfer continues (short transfers, -EAGAIN, -EINTR, end of file).
#include "io/tier_device.h"

#include <catch2/catch.hpp>

#include <cerrno>

namespace kvstream {
namespace {

IoRequest Request(IoKind kind, uint32_t length) {
  IoRequest r;
  r.Set(kind, 3, 4096, length, nullptr);
  return r;
}

TEST_CASE("errnos map to outcomes that say whether the copy is bad") {
  CHECK(IoStatusOfErrno(EIO) == IoStatus::kMediaError);
  CHECK(IoStatusOfErrno(ENODATA) == IoStatus::kEndOfFile);
  CHECK(IoStatusOfErrno(ENOENT) == IoStatus::kGone);
  CHECK(IoStatusOfErrno(ESTALE) == IoStatus::kGone);
  CHECK(IoStatusOfErrno(ENOSPC) == IoStatus::kNoSpace);
  CHECK(IoStatusOfErrno(EDQUOT) == IoStatus::kNoSpace);
  CHECK(IoStatusOfErrno(ECANCELED) == IoStatus::kFailed);
  CHECK(IoStatusOfErrno(ENOMEM) == IoStatus::kFailed);
  CHECK(IsBadCopy(IoStatus::kMediaError));
  CHECK(IsBadCopy(IoStatus::kEndOfFile));
  CHECK(IsBadCopy(IoStatus::kGone));
  CHECK_FALSE(IsBadCopy(IoStatus::kFailed));
  CHECK_FALSE(IsBadCopy(IoStatus::kNoSpace));
  CHECK(absl::IsResourceExhausted(ErrnoStatus(ENOSPC, "write")));
  CHECK(absl::IsNotFound(ErrnoStatus(ENOENT, "open")));
  CHECK(absl::IsPermissionDenied(ErrnoStatus(EROFS, "create")));
}

TEST_CASE("a short transfer continues from where it stopped until the request is whole") {
  IoRequest r = Request(IoKind::kRead, 3 * 4096);
  IoCompletion c;
  CHECK(AdvanceTransfer(&r, 4096, &c) == TransferStep::kResubmit);
  CHECK(r.transferred == 4096);
  CHECK(AdvanceTransfer(&r, 4096, &c) == TransferStep::kResubmit);
  CHECK(AdvanceTransfer(&r, 4096, &c) == TransferStep::kDone);
  CHECK(c.status == IoStatus::kOk);
  CHECK(c.request == &r);
}

TEST_CASE("EAGAIN and EINTR resubmit without progress, errors and end of file finish the request") {
  IoRequest r = Request(IoKind::kRead, 8192);
  IoCompletion c;
  CHECK(AdvanceTransfer(&r, -EAGAIN, &c) == TransferStep::kResubmit);
  CHECK(AdvanceTransfer(&r, -EINTR, &c) == TransferStep::kResubmit);
  CHECK(r.transferred == 0);
  CHECK(AdvanceTransfer(&r, 4096, &c) == TransferStep::kResubmit);
  CHECK(AdvanceTransfer(&r, 0, &c) == TransferStep::kDone);  // the file ends half way
  CHECK(c.status == IoStatus::kEndOfFile);

  IoRequest w = Request(IoKind::kWrite, 4096);
  CHECK(AdvanceTransfer(&w, -ENOSPC, &c) == TransferStep::kDone);
  CHECK(c.status == IoStatus::kNoSpace);
  CHECK(c.error == ENOSPC);
  CHECK(AdvanceTransfer(&w, 0, &c) == TransferStep::kDone);  // a write that makes no progress
  CHECK(c.status == IoStatus::kMediaError);

  IoRequest sync = Request(IoKind::kSync, 0);
  CHECK(AdvanceTransfer(&sync, 0, &c) == TransferStep::kDone);
  CHECK(c.status == IoStatus::kOk);
}

}  // namespace
}  // namespace kvstream
