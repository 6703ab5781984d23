#include "support/lab.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace vecflow::test {

bool can_use_netns() {
  static const bool ok = geteuid() == 0 && sh("ip netns list >/dev/null 2>&1") == 0;
  return ok;
}

std::string unique_name(std::string_view prefix) {
  static std::atomic<unsigned> counter{0};
  std::string name = std::string(prefix.substr(0, 3)) + std::to_string(getpid() % 100000) +
                     std::to_string(counter++ % 100);
  return name.substr(0, 11);
}

int sh(const std::string& command) {
  int rc = std::system(command.c_str());
  if (rc == -1) return -1;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string sh_output(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
    out.append(buf, n);
  pclose(p);
  return out;
}

std::string source_path(std::string_view relative) {
  return std::string(VECFLOW_SOURCE_DIR) + "/" + std::string(relative);
}

Lab::Lab(std::string name, int queues) : name_(std::move(name)) {
  std::string lab = source_path("tools/lab.sh");
  sh(lab + " down " + name_);
  ok_ = sh(lab + " up " + name_ + " --queues " + std::to_string(queues)) == 0;
}

Lab::~Lab() {
  sh(source_path("tools/lab.sh") + " down " + name_);
}

int Lab::exec(char side, const std::string& command) const {
  return sh("ip netns exec " + ns(side) + " sh -c '" + command + "'");
}

std::string Lab::exec_output(char side, const std::string& command) const {
  return sh_output("ip netns exec " + ns(side) + " sh -c '" + command + "'");
}

NetnsScope::NetnsScope(const std::string& ns) {
  saved_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  ok_ = saved_ >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0;
  if (target >= 0) close(target);
}

NetnsScope::~NetnsScope() {
  if (saved_ >= 0) {
    if (ok_) setns(saved_, CLONE_NEWNET);
    close(saved_);
  }
}

}  // namespace vecflow::test
