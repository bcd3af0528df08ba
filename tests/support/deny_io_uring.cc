// deny_io_uring COMMAND [ARG...]: runs COMMAND where io_uring is not allowed, as under Docker's
// and containerd's default seccomp profiles: a seccomp filter makes io_uring_setup(2),
// io_uring_enter(2) and io_uring_register(2) fail with EPERM. The filter is inherited across exec
// and fork. Exit 2: usage, or the filter could not be installed.
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "seccomp_filter.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: deny_io_uring COMMAND [ARG...]\n");
    return 2;
  }
  std::vector<sock_filter> prog = kvstream::testing::NativeCallsOnly();
  prog.insert(prog.end(), {
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  });
  if (!kvstream::testing::InstallSeccompFilter(prog)) {
    std::fprintf(stderr, "deny_io_uring: installing the seccomp filter: %s\n", std::strerror(errno));
    return 2;
  }
  execvp(argv[1], argv + 1);
  std::fprintf(stderr, "deny_io_uring: %s: %s\n", argv[1], std::strerror(errno));
  return 2;
}
