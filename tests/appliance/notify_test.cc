// vecflowd as systemd runs it: the exit statuses the unit's restart policy relies on
// (RestartPreventExitStatus=1) and the readiness protocol of Type=notify (READY=1 once
// forwarding has started, STOPPING=1 on SIGTERM), observed through a NOTIFY_SOCKET of our own.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace fs = std::filesystem;

namespace {

// EAL start-up under a sanitizer on a loaded machine takes seconds; this bounds a hang.
constexpr int kNotifyTimeoutS = 120;

struct Scratch {
  fs::path dir;
  Scratch() {
    char tmpl[] = "/tmp/vap-notify.XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~Scratch() { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
};

// A config that needs no interface, no hugepages and no privileges: one net_null port.
std::string null_config(const std::string& prefix) {
  return "cpu: {control: 0, workers: [0]}\n"
         "dpdk: {memory_mb: 64, hugepages: off, file_prefix: " +
         prefix +
         "}\n"
         "ports:\n"
         "  - {name: null0, type: dpdk, devargs: net_null0}\n"
         "pipeline:\n"
         "  - {stage: route, routes: [{prefix: 0.0.0.0/0, port: null0}]}\n";
}

// The receiving end of sd_notify(): a datagram socket bound to a path.
class NotifySocket {
 public:
  explicit NotifySocket(const fs::path& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    timeval tv{kNotifyTimeoutS, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() { close(fd_); }
  bool bound() const { return bound_; }
  const fs::path& path() const { return path_; }

  // Next message, or "" on timeout.
  std::string receive() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
  // Whether any message already queued says READY=1 (does not wait).
  bool sent_ready() {
    char buf[4096];
    for (;;) {
      ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return false;
      if (std::string(buf, static_cast<size_t>(n)).find("READY=1") != std::string::npos)
        return true;
    }
  }
  // Reads messages until one contains `field`; returns it, or "" on timeout.
  std::string wait_for(const std::string& field) {
    for (;;) {
      std::string m = receive();
      if (m.empty() || m.find(field) != std::string::npos) return m;
    }
  }

 private:
  fs::path path_;
  int fd_ = -1;
  bool bound_ = false;
};

// vecflowd with the given arguments and NOTIFY_SOCKET; its output goes to `log`.
pid_t spawn_vecflowd(const std::vector<std::string>& args, const std::string& notify,
                     const fs::path& log) {
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("NOTIFY_SOCKET=", 0) != 0) env_store.emplace_back(*e);
  }
  if (!notify.empty()) env_store.push_back("NOTIFY_SOCKET=" + notify);
  std::vector<char*> envp;
  for (auto& s : env_store)
    envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_store = {VECFLOWD_PATH};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_store)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, VECFLOWD_PATH, &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(VecflowdService, NotifiesReadyOnceRunningAndStoppingOnSigterm) {
  Scratch s;
  auto cfg = s.write("null.yaml", null_config("vap-notify-" + std::to_string(getpid())));
  NotifySocket notify(s.dir / "notify");
  ASSERT_TRUE(notify.bound());
  auto log = s.dir / "vecflowd.log";
  pid_t pid = spawn_vecflowd({"-c", cfg.string()}, notify.path().string(), log);
  ASSERT_GT(pid, 0);

  std::string ready = notify.wait_for("READY=1");
  if (ready.empty()) {
    kill(pid, SIGKILL);
    wait_exit(pid);
    FAIL() << "no READY=1 within " << kNotifyTimeoutS << " s; vecflowd said:\n" << slurp(log);
  }
  EXPECT_NE(ready.find("STATUS=forwarding"), std::string::npos) << ready;
  // READY=1 comes after the runtime launched: the log already says so.
  EXPECT_NE(slurp(log).find("running from"), std::string::npos) << slurp(log);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  std::string stopping = notify.wait_for("STOPPING=1");
  EXPECT_FALSE(stopping.empty()) << "no STOPPING=1 after SIGTERM";
  EXPECT_EQ(wait_exit(pid), 0) << slurp(log);
}

TEST(VecflowdService, ConfigErrorExitsOneWithLocatedErrorAndNeverNotifies) {
  Scratch s;
  auto cfg = s.write("bad.yaml", "dpdk:\n  memory_mb: lots\nports: []\n");
  NotifySocket notify(s.dir / "notify");
  ASSERT_TRUE(notify.bound());
  auto log = s.dir / "vecflowd.log";
  pid_t pid = spawn_vecflowd({"-c", cfg.string()}, notify.path().string(), log);
  ASSERT_GT(pid, 0);
  // Status 1 is the one the unit does not restart on.
  EXPECT_EQ(wait_exit(pid), 1);
  EXPECT_NE(slurp(log).find(cfg.string() + ":2:14: dpdk.memory_mb"), std::string::npos)
      << slurp(log);

  EXPECT_FALSE(notify.sent_ready());

  pid = spawn_vecflowd({"--check", cfg.string()}, "", log);
  EXPECT_EQ(wait_exit(pid), 1) << "ExecStartPre=vecflowd --check must fail the start";
}

TEST(VecflowdService, StartupFailureExitsTwoWithoutReady) {
  Scratch s;
  // Valid file, impossible start: more hugepages than any test machine has reserved.
  auto cfg = s.write("huge.yaml",
                     "cpu: {control: 0, workers: [0]}\n"
                     "dpdk: {memory_mb: 1048576, hugepages: on}\n"
                     "ports:\n"
                     "  - {name: null0, type: dpdk, devargs: net_null0}\n");
  NotifySocket notify(s.dir / "notify");
  ASSERT_TRUE(notify.bound());
  auto log = s.dir / "vecflowd.log";
  pid_t pid = spawn_vecflowd({"-c", cfg.string()}, notify.path().string(), log);
  ASSERT_GT(pid, 0);
  // Status 2 is retried by Restart=on-failure (an interface may appear, pages be freed).
  EXPECT_EQ(wait_exit(pid), 2) << slurp(log);
  EXPECT_NE(slurp(log).find("hugepages"), std::string::npos) << slurp(log);
  EXPECT_FALSE(notify.sent_ready());
}

}  // namespace
