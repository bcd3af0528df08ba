// restrict_families FAMILY... -- COMMAND [ARG...]: runs COMMAND with socket(2) limited to the
// given address families (AF_UNIX, AF_INET, ...), as systemd's RestrictAddressFamilies= does where
// no systemd runs: a seccomp filter makes socket() of any other family fail with EAFNOSUPPORT
// (socketpair(2) is not filtered, as under systemd). The filter is inherited across exec and
// fork, so `restrict_families ... -- setpriv ... kvstreamd` restricts the daemon. Exit 2: usage
// or the filter could not be installed.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../support/seccomp_filter.h"

namespace {

const std::map<std::string, int>& Families() {
  static const std::map<std::string, int> families = {
      {"AF_UNIX", AF_UNIX},       {"AF_LOCAL", AF_UNIX},     {"AF_INET", AF_INET},
      {"AF_INET6", AF_INET6},     {"AF_NETLINK", AF_NETLINK}, {"AF_PACKET", AF_PACKET},
      {"AF_VSOCK", AF_VSOCK},     {"AF_ALG", AF_ALG},         {"AF_BLUETOOTH", AF_BLUETOOTH}};
  return families;
}

int Usage(const char* why) {
  std::fprintf(stderr, "restrict_families: %s\nusage: restrict_families FAMILY... -- COMMAND [ARG...]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> allowed;
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const auto it = Families().find(argv[i]);
    if (it == Families().end()) return Usage((std::string("unknown family ") + argv[i]).c_str());
    allowed.push_back(it->second);
  }
  if (i + 1 >= argc) return Usage("no command");
  if (allowed.size() > 200) return Usage("too many families");

  // Another architecture's system calls are killed (SystemCallArchitectures=native); socket()
  // passes only for an allowed family; everything else is allowed.
  std::vector<sock_filter> prog = kvstream::testing::NativeCallsOnly();
  prog.insert(prog.end(), {
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      // The family is an int: the low 32 bits of the first argument (little-endian).
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
  });
  for (size_t k = 0; k < allowed.size(); ++k) {
    // Equal: jump over the remaining comparisons and the refusal to the final ALLOW.
    const auto skip = static_cast<uint8_t>(allowed.size() - k);
    prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(allowed[k]), skip, 0));
  }
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAFNOSUPPORT & SECCOMP_RET_DATA)));
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));

  if (!kvstream::testing::InstallSeccompFilter(prog)) {
    std::fprintf(stderr, "restrict_families: cannot install the seccomp filter: %s\n", std::strerror(errno));
    return 2;
  }
  execvp(argv[i + 1], argv + i + 1);
  std::fprintf(stderr, "restrict_families: cannot run %s: %s\n", argv[i + 1], std::strerror(errno));
  return 127;
}
