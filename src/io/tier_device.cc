#include "io/tier_device.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstream {

std::string_view ToString(IoStatus status) {
  switch (status) {
    case IoStatus::kOk: return "ok";
    case IoStatus::kMediaError: return "media_error";
    case IoStatus::kEndOfFile: return "end_of_file";
    case IoStatus::kGone: return "gone";
    case IoStatus::kNoSpace: return "no_space";
    case IoStatus::kFailed: return "failed";
    case IoStatus::kExists: return "exists";
  }
  return "?";
}

IoStatus IoStatusOfErrno(int error) {
  switch (error) {
    case 0: return IoStatus::kOk;
    case EIO: case EILSEQ: case EBADMSG: case EUCLEAN: return IoStatus::kMediaError;
    case ENODATA: return IoStatus::kEndOfFile;
    case ENOENT: case ESTALE: case ENOTCONN: case ENODEV: case ENXIO: return IoStatus::kGone;
    case ENOSPC: case EDQUOT: return IoStatus::kNoSpace;
    default: return IoStatus::kFailed;
  }
}

TransferStep AdvanceTransfer(IoRequest* request, int result, IoCompletion* completion) {
  *completion = {request, IoStatus::kOk, 0};
  if (request->abandoned && (result < 0 || request->transferred + static_cast<uint32_t>(result) < request->length)) {
    completion->status = IoStatus::kFailed;  // cancelled or cut short: nobody wants the rest
    completion->error = result < 0 ? -result : ECANCELED;
    return TransferStep::kDone;
  }
  if (result == -EAGAIN || result == -EINTR) return TransferStep::kResubmit;
  if (result < 0) {
    completion->status = IoStatusOfErrno(-result);
    completion->error = -result;
    return TransferStep::kDone;
  }
  if (request->kind == IoKind::kSync) return TransferStep::kDone;
  if (result == 0) {  // no progress: the file ends here (a read), or the device refuses (a write)
    completion->status = request->kind == IoKind::kRead ? IoStatus::kEndOfFile : IoStatus::kMediaError;
    completion->error = request->kind == IoKind::kRead ? ENODATA : EIO;
    return TransferStep::kDone;
  }
  request->transferred += static_cast<uint32_t>(result);
  return request->transferred < request->length ? TransferStep::kResubmit : TransferStep::kDone;
}

}  // namespace kvstream
