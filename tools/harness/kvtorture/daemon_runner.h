// Starts and kills a kvstreamd process for torture runs.
#pragma once

#include <sys/types.h>

#include <string>

namespace kvtorture {

class DaemonRunner {
 public:
  DaemonRunner(std::string binary, std::string config, std::string socket)
      : binary_(std::move(binary)), config_(std::move(config)), socket_(std::move(socket)) {}
  ~DaemonRunner() { Kill(); }

  // Starts the daemon (stderr appended to `log`) and waits until it serves; the seconds it took,
  // or a negative value when it exited or did not serve within 10 minutes.
  double Start(const std::string& log);
  // SIGKILL and reap; nothing of the daemon runs afterwards.
  void Kill();
  // SIGTERM (a clean shutdown) and reap; false when it did not exit 0.
  bool Stop();
  pid_t pid() const { return pid_; }

 private:
  std::string binary_, config_, socket_;
  pid_t pid_ = -1;
};

}  // namespace kvtorture
