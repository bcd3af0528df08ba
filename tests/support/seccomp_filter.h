// What the seccomp wrappers of the tests share (tests/support/deny_io_uring.cc,
// tests/packaging/restrict_families.cc): a filter that kills another architecture's system calls
// (as systemd's SystemCallArchitectures=native does), then the caller's rules, installed for the
// calling process and everything it executes.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvstream::testing {

#if defined(__x86_64__)
inline constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
#error "seccomp_filter.h: add this architecture's AUDIT_ARCH"
#endif

// The first statements of every filter: another architecture's calls are killed, and the system
// call number is loaded for the rules that follow.
inline std::vector<sock_filter> NativeCallsOnly() {
  return {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
}

// Installs `prog` (no new privileges first, as unprivileged seccomp needs); false with errno set
// when the kernel refuses.
inline bool InstallSeccompFilter(std::vector<sock_filter>& prog) {
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}

}  // namespace kvstream::testing
