// Running vecflowd and command lines from integration tests.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>

#include "support/lab.h"

namespace vecflow::test {

struct Exec {
  int rc = -1;
  std::string out;
  std::string err;
};

// Runs a shell command line; captures stdout, stderr and the exit status.
Exec run(const std::string& cmd);

// vecflowd (`binary`) in the lab's appliance namespace on `config`, its output in `log`;
// stopped (SIGTERM, then SIGKILL) on destruction.
class Daemon {
 public:
  Daemon(const Lab& lab, const std::string& binary, const std::string& config,
         const std::string& log);
  ~Daemon() { stop(); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  pid_t pid() const { return pid_; }
  // False once the process has exited (its status is kept for stop()).
  bool alive() const;
  // Waits (up to 30 s) until the control socket accepts a connection.
  bool wait_ready(const std::string& socket);
  // `sig` (SIGTERM by default), then SIGKILL after 10 s; returns the exit status, -1 if it
  // died of a signal or had to be killed (then killed_by_signal() says which signal ended it).
  int stop(int sig = SIGTERM);
  // Sends a signal and leaves the process running (SIGHUP: reload).
  void signal(int sig) const;
  int killed_by_signal() const { return term_signal_; }

 private:
  pid_t pid_ = -1;
  mutable std::optional<int> exit_status_;  // set when alive() reaped the process
  mutable int term_signal_ = 0;             // the signal that ended it, if one did
};

}  // namespace vecflow::test
