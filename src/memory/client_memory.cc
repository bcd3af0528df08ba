#include "memory/client_memory.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "format/chunk_format.h"

namespace kvstream {
namespace {

// The jump back into GuardedAccess or GuardedCopy while this thread reads or copies into client
// memory, else null.
// initial-exec: read in a signal handler, where a lazily allocated TLS block could not be.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_guard = nullptr;

void OnSigbus(int, siginfo_t*, void*) {
  if (sigjmp_buf* guard = t_guard) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);
  }
  // Not a guarded load: the default action. Returning re-runs the faulting access, which then
  // terminates the process (with a core) exactly as it would have without this handler.
  signal(SIGBUS, SIG_DFL);
}

void InstallGuard() {
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

absl::Status Shrank(const FileRange& range, uint64_t got) {
  return absl::FailedPreconditionError(absl::StrCat("the client's memory no longer covers [", range.offset, ", +",
                                                    range.size, ") (it ends ", got, " bytes in: truncated?)"));
}

absl::Status Failed(const char* what, const FileRange& range) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " the client's memory at ", range.offset, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status ReadClientMemory(const FileRange& range, void* out) {
  size_t got = 0;
  while (got < range.size) {
    const ssize_t n = pread(range.fd, static_cast<uint8_t*>(out) + got, range.size - got,
                            static_cast<off_t>(range.offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed("reading", range);
    if (n == 0) return Shrank(range, got);
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

namespace {

// Runs `access` (loads from, or stores to, client memory that may vanish) with this thread's
// SIGBUS guard set: FailedPrecondition instead of a crash when a page it touches is gone.
template <typename Access>
absl::Status Guarded(Access&& access) {
  static std::once_flag installed;
  std::call_once(installed, InstallGuard);
  sigjmp_buf recover;
  // Without saving the signal mask (no system call per block): SA_NODEFER leaves SIGBUS unblocked
  // in the handler, so there is nothing to restore after the jump.
  if (sigsetjmp(recover, 0) != 0) {
    return absl::FailedPreconditionError("the client's memory is gone under the block (truncated?)");
  }
  t_guard = &recover;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the guard is set before the first access
  access();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return absl::OkStatus();
}

}  // namespace

absl::Status GuardedAccess(absl::FunctionRef<void()> access) { return Guarded(access); }

absl::Status GuardedCopy(uint8_t* dst, const void* src, size_t size) {
  return Guarded([&] { std::memcpy(dst, src, size); });
}

}  // namespace kvstream
