// Test helpers for namespaces and the lab (tools/lab.sh). Tests that need root skip, never
// pass, when they cannot run; everything a test creates is removed by a destructor, so a
// failing assertion still cleans up.
#pragma once

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace vecflow::test {

// True when the process is root and `ip netns` works.
bool can_use_netns();

// A name no other test process uses: prefix + pid + counter, at most 11 characters (the lab
// appends "-c"/"-a"/"-s", and interface names must stay under 16).
std::string unique_name(std::string_view prefix);

// Runs a shell command; returns its exit status (or -1). Output is inherited.
int sh(const std::string& command);
// Runs a shell command and returns what it wrote to stdout.
std::string sh_output(const std::string& command);

// Absolute path of a file in the source tree.
std::string source_path(std::string_view relative);

// The three-namespace lab of tools/lab.sh: NAME-c (client), NAME-a (appliance), NAME-s
// (server), with wan0/lan0 on the appliance side. Removed on destruction.
class Lab {
 public:
  explicit Lab(std::string name, int queues = 1);
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  // Namespace of a side: 'c', 'a' or 's'.
  std::string ns(char side) const { return name_ + "-" + side; }
  // Runs a shell command inside a side's namespace; returns its exit status.
  int exec(char side, const std::string& command) const;
  std::string exec_output(char side, const std::string& command) const;

 private:
  std::string name_;
  bool ok_ = false;
};

// Moves the calling thread into a network namespace for the scope's lifetime (sockets made
// meanwhile belong to that namespace) and back on destruction.
class NetnsScope {
 public:
  explicit NetnsScope(const std::string& ns);
  ~NetnsScope();
  NetnsScope(const NetnsScope&) = delete;
  NetnsScope& operator=(const NetnsScope&) = delete;
  bool ok() const { return ok_; }

 private:
  int saved_ = -1;
  bool ok_ = false;
};

}  // namespace vecflow::test

#define VECFLOW_REQUIRE_NETNS()                                       \
  do {                                                                \
    if (!::vecflow::test::can_use_netns())                            \
      GTEST_SKIP() << "needs root and network namespaces (ip netns)"; \
  } while (0)
