#include "support/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

namespace vecflow::test {

using namespace std::chrono_literals;

Exec run(const std::string& cmd) {
  char tmpl[] = "/tmp/vf-err-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  Exec r;
  r.out = sh_output(cmd + " 2>" + tmpl + "; echo \"rc=$?\"");
  auto pos = r.out.rfind("rc=");
  r.rc = std::stoi(r.out.substr(pos + 3));
  r.out.erase(pos);
  std::ifstream e(tmpl);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  unlink(tmpl);
  return r;
}

Daemon::Daemon(const Lab& lab, const std::string& binary, const std::string& config,
               const std::string& log) {
  pid_ = fork();
  if (pid_ == 0) {
    // Started as a service manager starts it: default dispositions and nothing blocked. (A
    // thread of the test inside system() has SIGINT ignored process-wide, which a child would
    // inherit through exec.)
    for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP})
      ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    // `ip netns exec` execs in place: the pid stays vecflowd's, so signals reach it.
    execl("/usr/sbin/ip", "ip", "netns", "exec", lab.ns('a').c_str(), binary.c_str(), "-c",
          config.c_str(), nullptr);
    _exit(127);
  }
}

namespace {
// The exit status, or -1 for a process that died of a signal (stored in `signal`).
int exit_code(int status, int& signal) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) signal = WTERMSIG(status);
  return -1;
}
}  // namespace

bool Daemon::alive() const {
  if (pid_ <= 0 || exit_status_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
  exit_status_ = exit_code(status, term_signal_);
  return false;
}

void Daemon::signal(int sig) const {
  if (alive()) kill(pid_, sig);
}

bool Daemon::wait_ready(const std::string& socket) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && alive()) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (ok) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

int Daemon::stop(int sig) {
  if (pid_ <= 0) return -1;
  if (!alive()) {
    pid_ = -1;
    return *exit_status_;
  }
  kill(pid_, sig);
  int status = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return exit_code(status, term_signal_);
    }
    std::this_thread::sleep_for(50ms);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  term_signal_ = SIGKILL;
  pid_ = -1;
  return -1;
}

}  // namespace vecflow::test
