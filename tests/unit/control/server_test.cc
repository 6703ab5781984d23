// The control server on a real unix socket, run by a real Lcore on a thread: what a client
// that misbehaves gets, many clients at once, the metrics endpoint, credentials, and that the
// lcore sleeps while idle and still answers.
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "control/server.h"
#include "runtime/lcore.h"

namespace vecflow::control {
namespace {

using namespace std::chrono_literals;

// A raw client: bytes in, bytes out, with a deadline on every read.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  void send_text(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // The next reply line, or "" on EOF/timeout.
  std::string line(std::chrono::milliseconds timeout = 5000ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (buf_.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char b[4096];
      ssize_t n = ::recv(fd_, b, sizeof(b), 0);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
    auto nl = buf_.find('\n');
    std::string l = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return l;
  }
  Json reply(std::chrono::milliseconds timeout = 5000ms) {
    std::string l = line(timeout);
    return l.empty() ? Json() : Json::parse(l);
  }
  // True when the server closed the connection within the timeout: EOF, or a reset when it
  // closed with bytes of ours still unread.
  bool closed(std::chrono::milliseconds timeout = 5000ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char b[64];
    return ::recv(fd_, b, sizeof(b), 0) <= 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

const CommandSpec kPing{"ping", "answers", Access::Read, {{"n", ArgType::Uint, "echoed back"}}};
const CommandSpec kPoke{"poke", "changes state", Access::Change};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vct-srv-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.socket_path = dir_ + "/run/control.sock";
    options_.group = "";
    options_.read_timeout_ms = 2000;
    ASSERT_TRUE(
        registry_.add_command(Command{&kPing, [this](const CommandContext& c) -> CommandResult {
                                        handler_thread_ = std::this_thread::get_id();
                                        return Json{{"pong", c.args.value("n", 0)}};
                                      }}));
    ASSERT_TRUE(registry_.add_command(Command{&kPoke, [](const CommandContext&) -> CommandResult {
                                                return Json{{"poked", true}};
                                              }}));
  }

  void start() {
    auto s = ControlServer::create(options_, registry_);
    ASSERT_TRUE(s) << s.error().message;
    server_ = *s;
    lcore_ = std::make_unique<Lcore>(0, BackoffConfig{.spin_us = 20, .idle_sleep_max_us = 1000});
    lcore_->add_service(server_);
    thread_ = std::thread([this] {
      lcore_thread_ = std::this_thread::get_id();
      lcore_->run();
    });
  }

  void TearDown() override {
    if (lcore_) {
      lcore_->request_stop();
      thread_.join();
      lcore_.reset();
    }
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Waits until the lcore sleeps on the server's wake-up descriptor.
  bool wait_asleep() {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (server_->stats().sleeping.load()) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  std::string dir_;
  ServerOptions options_;
  Registry registry_;
  std::shared_ptr<ControlServer> server_;
  std::unique_ptr<Lcore> lcore_;
  std::thread thread_;
  std::thread::id lcore_thread_;
  std::thread::id handler_thread_;
};

TEST_F(ServerTest, AnswersRequestsInOrderOnOneConnection) {
  start();
  RawClient c(options_.socket_path);
  ASSERT_TRUE(c.connected());
  c.send_text(R"({"command":"ping","id":1,"args":{"n":1}})"
              "\n"
              R"({"command":"ping","id":2,"args":{"n":2}})"
              "\n");
  Json a = c.reply();
  Json b = c.reply();
  EXPECT_EQ(a["id"], 1);
  EXPECT_EQ(a["result"]["pong"], 1);
  EXPECT_EQ(b["id"], 2);
  EXPECT_EQ(handler_thread_, lcore_thread_);  // handlers run on the control lcore
}

TEST_F(ServerTest, MalformedJsonGetsAnErrorAndTheConnectionStaysUsable) {
  start();
  RawClient c(options_.socket_path);
  c.send_text("this is not json\n");
  Json r = c.reply();
  EXPECT_EQ(r["error"]["code"], "malformed_request");
  c.send_text("{\"command\":\"ping\"}\n");
  EXPECT_TRUE(c.reply()["ok"].get<bool>());
}

TEST_F(ServerTest, TruncatedRequestIsAnsweredThenClosed) {
  start();
  RawClient c(options_.socket_path);
  c.send_text(R"({"command":"pi)");
  c.shutdown_write();
  EXPECT_EQ(c.reply()["error"]["code"], "truncated_request");
  EXPECT_TRUE(c.closed());
}

TEST_F(ServerTest, LastRequestWithoutNewlineIsServedAtEof) {
  start();
  RawClient c(options_.socket_path);
  c.send_text(R"({"command":"ping"})");
  c.shutdown_write();
  EXPECT_TRUE(c.reply()["ok"].get<bool>());
}

TEST_F(ServerTest, OversizedRequestIsRefusedAndClosed) {
  options_.max_request_bytes = 256;
  start();
  RawClient c(options_.socket_path);
  c.send_text(std::string(100000, 'x'));
  Json r = c.reply();
  EXPECT_EQ(r["error"]["code"], "request_too_large");
  EXPECT_TRUE(c.closed());
  // An oversized line that does end in a newline is refused the same way.
  RawClient d(options_.socket_path);
  d.send_text("{\"command\":\"ping\",\"id\":\"" + std::string(300, 'y') + "\"}\n");
  EXPECT_EQ(d.reply()["error"]["code"], "request_too_large");
}

TEST_F(ServerTest, UnknownCommandIsAnErrorReply) {
  start();
  RawClient c(options_.socket_path);
  c.send_text("{\"command\":\"ports\"}\n");
  Json r = c.reply();
  EXPECT_EQ(r["error"]["code"], "unknown_command");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("ping"), std::string::npos);
}

TEST_F(ServerTest, SilentClientGetsATimeoutAndIsClosed) {
  options_.read_timeout_ms = 200;
  start();
  RawClient c(options_.socket_path);
  ASSERT_TRUE(c.connected());
  Json r = c.reply();
  EXPECT_EQ(r["error"]["code"], "timeout");
  EXPECT_TRUE(c.closed());
  // And the server still serves the next client.
  RawClient d(options_.socket_path);
  d.send_text("{\"command\":\"ping\"}\n");
  EXPECT_TRUE(d.reply()["ok"].get<bool>());
}

TEST_F(ServerTest, HundredConcurrentClientsAreAllAnswered) {
  start();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 100; ++i) {
    clients.push_back(std::make_unique<RawClient>(options_.socket_path));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  for (int i = 0; i < 100; ++i)
    clients[i]->send_text(fmt::format("{{\"command\":\"ping\",\"id\":{}}}\n", i));
  for (int i = 0; i < 100; ++i) {
    Json r = clients[i]->reply();
    ASSERT_TRUE(r.is_object()) << "client " << i << " got no reply";
    EXPECT_EQ(r["id"], i);
  }
  clients.clear();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->connections(), 0u);
}

TEST_F(ServerTest, ClientsBeyondTheLimitGetBusy) {
  options_.read_timeout_ms = 30000;
  start();
  std::vector<std::unique_ptr<RawClient>> idle;
  for (size_t i = 0; i < ControlServer::kMaxConnections; ++i)
    idle.push_back(std::make_unique<RawClient>(options_.socket_path));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->connections() < ControlServer::kMaxConnections &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  RawClient extra(options_.socket_path);
  EXPECT_EQ(extra.reply()["error"]["code"], "busy");
  EXPECT_TRUE(extra.closed());
}

TEST_F(ServerTest, SocketGetsItsModeAndItsDirectory) {
  options_.socket_mode = 0640;
  start();
  struct stat st {};
  ASSERT_EQ(stat(options_.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(ServerTest, StaleSocketIsReplacedAndALiveOneIsNot) {
  std::filesystem::create_directories(dir_ + "/run");
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, options_.socket_path.c_str(), sizeof(a.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    close(fd);  // left behind, as by a crash
  }
  start();
  RawClient c(options_.socket_path);
  c.send_text("{\"command\":\"ping\"}\n");
  EXPECT_TRUE(c.reply()["ok"].get<bool>());
  Registry other;
  auto second = ControlServer::create(options_, other);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("served by another process"), std::string::npos);
  // The refused second server did not remove the live socket.
  RawClient d(options_.socket_path);
  d.send_text("{\"command\":\"ping\"}\n");
  EXPECT_TRUE(d.reply()["ok"].get<bool>());
}

TEST_F(ServerTest, SocketIsRemovedWhenTheServerStops) {
  start();
  lcore_->request_stop();
  thread_.join();
  lcore_.reset();
  server_.reset();
  EXPECT_FALSE(std::filesystem::exists(options_.socket_path));
}

TEST_F(ServerTest, IdleLcoreSleepsAndWakesForARequest) {
  start();
  ASSERT_TRUE(wait_asleep()) << "the control lcore never slept on its descriptor";
  uint64_t sleeps = lcore_->stats().interrupt_sleeps.load();
  RawClient c(options_.socket_path);
  c.send_text("{\"command\":\"ping\"}\n");
  EXPECT_TRUE(c.reply()["ok"].get<bool>());
  EXPECT_GE(lcore_->stats().interrupt_sleeps.load(), sleeps);
}

TEST_F(ServerTest, PostAndTimersWakeTheSleepingLcore) {
  start();
  ASSERT_TRUE(wait_asleep());
  std::atomic<bool> posted{false};
  std::atomic<bool> fired{false};
  std::unique_ptr<ScheduledCall> call;
  std::thread::id ran_on;
  server_->post([&] {
    ran_on = std::this_thread::get_id();
    posted = true;
    call = server_->schedule(50ms, [&] { fired = true; });
  });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!fired && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(posted);
  EXPECT_TRUE(fired);
  EXPECT_EQ(ran_on, lcore_thread_);
  std::atomic<bool> released{false};
  server_->post([&] {
    call.reset();
    released = true;
  });
  deadline = std::chrono::steady_clock::now() + 5s;
  while (!released && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(released);
}

TEST_F(ServerTest, CancelledCallDoesNotRun) {
  start();
  std::atomic<bool> fired{false};
  std::atomic<bool> cancelled{false};
  std::unique_ptr<ScheduledCall> call;
  server_->post([&] {
    call = server_->schedule(100ms, [&] { fired = true; });
    call->cancel();
    cancelled = true;
  });
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(fired);
  // The call belongs to the control thread: release it there before the test's locals go.
  std::atomic<bool> released{false};
  server_->post([&] {
    call.reset();
    released = true;
  });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!released && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(released);
}

TEST_F(ServerTest, ReloadRequestRunsTheHandlerOnTheControlThread) {
  std::atomic<int> reloads{0};
  std::thread::id ran_on;
  start();
  server_->post([&] {
    server_->set_reload_handler([&] {
      ran_on = std::this_thread::get_id();
      ++reloads;
    });
  });
  std::this_thread::sleep_for(50ms);
  server_->request_reload();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (reloads == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(reloads, 1);
  EXPECT_EQ(ran_on, lcore_thread_);
}

TEST_F(ServerTest, SamplerKeepsRatesOfRegisteredCounters) {
  static const MetricFamily kTicks{"vecflow_test_ticks_total", "ticks", MetricType::Counter, {}};
  // Statics: the collector and posted calls run on the lcore until TearDown stops it.
  static std::atomic<uint64_t> ticks{0};
  static std::atomic<double> rate{-1};
  registry_.add_collector("test", [](Snapshot& s) { s.add(kTicks, {}, ticks += 100); });
  start();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (rate < 0 && std::chrono::steady_clock::now() < deadline) {
    server_->post([this] {
      auto r = server_->rates().rate(kTicks, {});
      if (r) rate = *r;
    });
    std::this_thread::sleep_for(100ms);
  }
  // 100 per collection; requests between samples collect too, so at least 100 per interval.
  ASSERT_GE(rate,
            100.0 / std::chrono::duration<double>(ControlServer::kSampleInterval).count() * 0.5)
      << "no rate within 5 s";
}

// ---- HTTP /metrics ------------------------------------------------------------------------------

std::string http(const std::string& endpoint, const std::string& request) {
  auto colon = endpoint.rfind(':');
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char b[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 3000) > 0) {
    ssize_t n = ::recv(fd, b, sizeof(b), 0);
    if (n <= 0) break;
    out.append(b, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST_F(ServerTest, MetricsEndpointServesTheSnapshot) {
  static const MetricFamily kSeen{"vecflow_test_seen_total", "seen", MetricType::Counter, {"port"}};
  registry_.add_collector("test", [](Snapshot& s) { s.add(kSeen, {"wan"}, 42); });
  options_.metrics_address = "127.0.0.1:0";
  start();
  std::string ep = server_->metrics_endpoint();
  ASSERT_FALSE(ep.empty());
  std::string r = http(ep, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 200"), std::string::npos) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(r.find("vecflow_test_seen_total{port=\"wan\"} 42\n"), std::string::npos);
  EXPECT_NE(http(ep, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").find("404"),
            std::string::npos);
  EXPECT_NE(http(ep,
                 "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: "
                 "close\r\n\r\n")
                .find("405"),
            std::string::npos);
  // Keep-alive: two requests on one connection, two answers.
  std::string two = http(ep,
                         "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                         "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  size_t first = two.find("HTTP/1.1 200");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(two.find("HTTP/1.1 200", first + 1), std::string::npos);
  // Garbage is closed, and the endpoint keeps serving.
  http(ep, "\x01\x02 nonsense\r\n\r\n");
  EXPECT_NE(http(ep, "GET /metrics HTTP/1.0\r\n\r\n").find("200"), std::string::npos);
}

TEST_F(ServerTest, MetricsAddressInUseFailsStartUp) {
  options_.metrics_address = "127.0.0.1:0";
  start();
  ServerOptions second = options_;
  second.socket_path = dir_ + "/other.sock";
  second.metrics_address = server_->metrics_endpoint();
  Registry other;
  auto s = ControlServer::create(second, other);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("cannot serve metrics"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(second.socket_path));  // nothing left behind
}

// ---- credentials
// ----------------------------------------------------------------------------------

// Runs `request` from a child process with the given credentials; returns the error code of
// the reply ("" when ok), or "connect" when the kernel refused the connection.
std::string as_user(const std::string& path, uid_t uid, gid_t gid, std::vector<gid_t> groups,
                    const std::string& request) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    std::string out = "setid";
    if (setgroups(groups.size(), groups.data()) == 0 && setgid(gid) == 0 && setuid(uid) == 0) {
      RawClient c(path);
      if (!c.connected()) {
        out = "connect";
      } else {
        c.send_text(request + "\n");
        std::string l = c.line();
        Json r = Json::parse(l, nullptr, false);
        out = r.is_discarded()      ? "noreply"
              : r["ok"].get<bool>() ? ""
                                    : r["error"]["code"].get<std::string>();
      }
    }
    ssize_t n = write(pipefd[1], out.data(), out.size());
    (void)n;
    _exit(0);
  }
  close(pipefd[1]);
  std::string out;
  char b[256];
  ssize_t n;
  while ((n = read(pipefd[0], b, sizeof(b))) > 0)
    out.append(b, static_cast<size_t>(n));
  close(pipefd[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

constexpr uid_t kNobody = 65534;

TEST_F(ServerTest, ChangeCommandsNeedRootOrTheGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other users";
  struct group* g = getgrnam("nogroup");
  if (!g) GTEST_SKIP() << "no 'nogroup' group";
  gid_t nogroup = g->gr_gid;
  options_.group = "nogroup";
  options_.socket_mode = 0666;  // let everyone connect; the server decides who may change
  start();
  std::filesystem::permissions(dir_, std::filesystem::perms::all);
  std::filesystem::permissions(dir_ + "/run", std::filesystem::perms::all);
  const std::string& path = options_.socket_path;
  // Outside the group: reads work, changes do not.
  EXPECT_EQ(as_user(path, kNobody, 1, {1}, R"({"command":"ping"})"), "");
  EXPECT_EQ(as_user(path, kNobody, 1, {1}, R"({"command":"poke"})"), "permission_denied");
  // In the group as supplementary group (SO_PEERGROUPS) or primary group: allowed.
  EXPECT_EQ(as_user(path, kNobody, 1, {1, nogroup}, R"({"command":"poke"})"), "");
  EXPECT_EQ(as_user(path, kNobody, nogroup, {}, R"({"command":"poke"})"), "");
  // Root always.
  RawClient c(path);
  c.send_text(R"({"command":"poke"})"
              "\n");
  EXPECT_TRUE(c.reply()["ok"].get<bool>());
}

TEST_F(ServerTest, KernelRefusesUsersTheSocketModeExcludes) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other users";
  struct group* g = getgrnam("nogroup");
  if (!g) GTEST_SKIP() << "no 'nogroup' group";
  gid_t nogroup = g->gr_gid;
  options_.group = "nogroup";
  options_.socket_mode = 0660;
  start();
  std::filesystem::permissions(dir_, std::filesystem::perms::all);
  std::filesystem::permissions(dir_ + "/run", std::filesystem::perms::all);
  EXPECT_EQ(as_user(options_.socket_path, kNobody, 1, {1}, R"({"command":"ping"})"), "connect");
  EXPECT_EQ(as_user(options_.socket_path, kNobody, 1, {1, nogroup}, R"({"command":"ping"})"), "");
}

}  // namespace
}  // namespace vecflow::control
