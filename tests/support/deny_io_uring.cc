// deny_io_uring COMMAND [ARG...]: runs COMMAND where io_uring is not allowed, as under Docker's
// and containerd's default seccomp profiles: a seccomp filter makes io_uring_setup(2),
// io_uring_enter(2) and io_uring_register(2) fail with EPERM. The filter is inherited across exec
// and fork. Exit 2: usage, or the filter could not be installed.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
#error "deny_io_uring: add this architecture's AUDIT_ARCH"
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: deny_io_uring COMMAND [ARG...]\n");
    return 2;
  }
  constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  sock_filter prog[] = {
      // Another architecture's system calls are killed; the three io_uring calls are refused.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, kDeny),
  };
  sock_fprog fprog{static_cast<unsigned short>(sizeof(prog) / sizeof(prog[0])), prog};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
    std::fprintf(stderr, "deny_io_uring: installing the seccomp filter: %s\n", std::strerror(errno));
    return 2;
  }
  execvp(argv[1], argv + 1);
  std::fprintf(stderr, "deny_io_uring: %s: %s\n", argv[1], std::strerror(errno));
  return 2;
}
