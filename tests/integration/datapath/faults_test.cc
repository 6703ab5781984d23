// Faults under load (issue "Reliability"): vecflowd on the demo topology keeps forwarding a
// UDP flood from the client to the server while the test breaks something, and afterwards
// every packet is accounted for (rx = tx + kernel + dropped on each port) and any loss sits
// under the reason the fault explains.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

// What one flood did, from both ends.
struct FloodResult {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t reordered = 0;
  uint64_t socket_drops = 0;
};

// A client of the control socket (unix sockets are not bound to a network namespace).
class ControlClient {
 public:
  explicit ControlClient(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd_);
      fd_ = -1;
    }
    // Longer than any server-side timeout: under ASan 256 status replies take seconds, and
    // the client must not give up before the server has answered or refused.
    timeval tv{60, 0};
    if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~ControlClient() {
    if (fd_ >= 0) close(fd_);
  }
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // One reply line, or "" when the server closed the connection (or 60 s passed); ended()
  // then says how.
  std::string reply() {
    std::string line;
    char c;
    ssize_t n;
    // A socket with SO_RCVTIMEO is not restarted after a signal (signal(7)), whatever the
    // handler's SA_RESTART: EINTR means try again.
    while ((n = ::recv(fd_, &c, 1, 0)) == 1 || (n < 0 && errno == EINTR)) {
      if (n < 0) continue;
      if (c == '\n') return line;
      line += c;
    }
    ended_ = n == 0 ? "end of stream" : std::strerror(errno);
    if (!line.empty()) ended_ += " after '" + line + "'";
    return "";
  }
  const std::string& ended() const { return ended_; }

 private:
  int fd_ = -1;
  std::string ended_;
};

size_t open_descriptors(pid_t pid) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    ++n;
  return n;
}

uint64_t resident_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

class Faults : public Forwarding {
 protected:
  // Floods client -> server (UDP to kFloodPort, 64 B frames, `flows` flows per sender) at
  // `rate` pps per sender (0: as fast as trafgen can) for `seconds`, running `during`
  // meanwhile on this thread. Each of `senders` trafgen processes sends its own flows.
  // `pinned`: sender i runs on CPU i only. AF_PACKET picks a veth's tx queue by the sending CPU,
  // so a sender the kernel moves between CPUs spreads its flows over both queues, and they reach
  // vecflowd reordered already; pinned, each flow enters on one queue.
  FloodResult flood(double rate, double seconds, const std::function<void()>& during,
                    unsigned flows = 64, unsigned senders = 1, bool pinned = false) {
    const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
    const std::string recv_json = dir_ + "/recv.json";
    auto send_json = [&](unsigned i) { return dir_ + "/send" + std::to_string(i) + ".json"; };
    std::thread receiver([&] {
      lab_->exec('s', std::string(TRAFGEN_PATH) + " recv --dev eth0 --idle-exit 2000 --duration " +
                          std::to_string(seconds + 30) + " --json > " + recv_json);
    });
    std::this_thread::sleep_for(300ms);
    std::vector<std::thread> sending;
    for (unsigned i = 0; i < senders; ++i) {
      sending.emplace_back([&, i] {
        lab_->exec('c', (pinned ? "taskset -c " + std::to_string(i) + " " : std::string()) +
                            TRAFGEN_PATH + " send --dev eth0 --dst 198.51.100.2 --dst-mac " +
                            wan_mac.substr(0, 17) + " --flows " + std::to_string(flows) +
                            " --first-flow " + std::to_string(i * flows) + " --size 60" +
                            (rate > 0 ? " --rate " + std::to_string(rate) : "") + " --dst-port " +
                            std::to_string(kFloodPort) + " --duration " + std::to_string(seconds) +
                            " --json > " + send_json(i));
      });
    }
    during();
    for (auto& t : sending)
      t.join();
    receiver.join();
    FloodResult r;
    for (unsigned i = 0; i < senders; ++i) {
      Json s = Json::parse(std::ifstream(send_json(i)), nullptr, false);
      if (s.is_discarded()) {
        ADD_FAILURE() << "trafgen sender " << i << " left no result";
        return r;
      }
      r.sent += s["sent"].get<uint64_t>();
    }
    Json g = Json::parse(std::ifstream(recv_json), nullptr, false);
    if (g.is_discarded()) {
      ADD_FAILURE() << "trafgen receiver left no result";
      return r;
    }
    r.received = g["received"];
    r.reordered = g["reordered"];
    r.socket_drops = g["socket_drops"];
    return r;
  }

  // Userspace drops of the wan port (where the flood enters) by reason.
  std::map<std::string, uint64_t> wan_drops() {
    std::map<std::string, uint64_t> out;
    const Json errors = json("errors");
    for (const auto& w : errors["by_port"])
      if (w["port"] == "wan")
        out[w["reason"].get<std::string>() + "/" + w["layer"].get<std::string>()] +=
            w["count"].get<uint64_t>();
    return out;
  }

  static std::map<std::string, uint64_t> delta(const std::map<std::string, uint64_t>& a,
                                               const std::map<std::string, uint64_t>& b) {
    std::map<std::string, uint64_t> d;
    for (const auto& [k, v] : b)
      if (uint64_t before = a.count(k) ? a.at(k) : 0; v > before) d[k] = v - before;
    return d;
  }

  Json steering_port(const std::string& name) {
    const Json steering = json("steering");
    for (const auto& p : steering["ports"])
      if (p["port"] == name) return p;
    return Json();
  }

  // Sends for 0.1 s at 10 kpps; true when every packet arrived. A steering program (re-)attached
  // to a veth bounces its carrier for up to ~0.3 s: the probe starts once both interfaces and
  // vecflowd's view of them are up again.
  ::testing::AssertionResult probe() {
    for (int i = 0; i < 50; ++i) {
      if (lab_->exec('a',
                     "grep -qx 1 /sys/class/net/wan0/carrier && "
                     "grep -qx 1 /sys/class/net/lan0/carrier") == 0)
        break;
      std::this_thread::sleep_for(20ms);
    }
    if (!wait_links_up())
      return ::testing::AssertionFailure() << "links not up: " << ctl("status").out;
    FloodResult r = flood(10000, 0.1, [] {});
    if (r.sent > 0 && r.received == r.sent) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "probe: sent " << r.sent << ", received " << r.received;
  }
};

// Ten times lan0 (the appliance's port towards the server) goes down for 300 ms while a flood
// crosses it. vecflowd keeps running; what it cannot send while the link is down is counted
// as link_down (or, while the kernel has flushed the server's neighbour entry, held until the
// server is resolved again and neigh_unresolved beyond the hold queue); once the link is
// back, forwarding resumes within a second.
TEST_F(Faults, LinkFlapsLoseOnlyToLinkDownAndForwardingResumes) {
  Json acc0 = settled_accounting();
  auto drops0 = wan_drops();
  auto lan0_tx_dropped = [&] {
    return std::stoull(lab_->exec_output('a', "cat /sys/class/net/lan0/statistics/tx_dropped"));
  };
  const uint64_t wire0 = lan0_tx_dropped();
  FloodResult r = flood(20000, 16, [&] {
    std::this_thread::sleep_for(500ms);
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(lab_->exec('a', "ip link set lan0 down"), 0);
      std::this_thread::sleep_for(300ms);
      ASSERT_EQ(lab_->exec('a', "ip link set lan0 up"), 0);
      std::this_thread::sleep_for(1200ms);
    }
  });
  ASSERT_TRUE(daemon_->alive()) << log();
  Json acc = settled_accounting();
  expect_exact(acc);
  auto lost = delta(drops0, wan_drops());
  const Json& w0 = port(acc0, "wan");
  const Json& w = port(acc, "wan");
  uint64_t kernel = w["kernel_packets"].get<uint64_t>() - w0["kernel_packets"].get<uint64_t>();
  uint64_t link_down = lost.count("link_down/userspace") ? lost["link_down/userspace"] : 0;
  uint64_t unresolved =
      lost.count("neigh_unresolved/userspace") ? lost["neigh_unresolved/userspace"] : 0;
  // Frames vecflowd had handed to lan0 that the kernel dropped as the carrier went away:
  // lost on the wire, after vecflowd counted them transmitted.
  uint64_t wire = lan0_tx_dropped() - wire0;
  // While lan0 is down the kernel flushes its neighbour entries, and the neighbour stage
  // (unresolved: hold) holds the first packets to the server until it is resolved again and
  // drops the rest as neigh_unresolved; the others meet the down link itself.
  EXPECT_GT(link_down + unresolved, 0u) << "no packet met a down link: no flap happened under load";
  // Every packet sent arrived, or met the down link or an unresolved server, or went to the
  // kernel, or was among what the kernel dropped on lan0's wire (that count also holds the
  // kernel's own frames, ARP and the like, hence at most): no other loss. `kernel` may hold a
  // few of the hosts' own frames too (IPv6 neighbour discovery lifted and handed back), hence
  // the slack of 10.
  const uint64_t explained = r.received + link_down + unresolved + kernel;
  std::cout << "link flaps: sent " << r.sent << ", received " << r.received << ", link_down "
            << link_down << ", neigh_unresolved " << unresolved << ", to the kernel " << kernel
            << ", dropped on lan0's wire " << wire << "\n";
  EXPECT_GE(r.sent + 10, explained);
  EXPECT_LE(r.sent - std::min(r.sent, explained), wire)
      << Json(lost).dump() << " sent " << r.sent << " received " << r.received << " link_down "
      << link_down << " neigh_unresolved " << unresolved << " kernel " << kernel << " wire "
      << wire;
  for (const auto& [reason, n] : lost) {
    EXPECT_TRUE(reason == "link_down/userspace" || reason == "neigh_unresolved/userspace")
        << reason << ": " << n << " packets";
  }
  EXPECT_EQ(r.socket_drops, 0u);
  EXPECT_EQ(lab_->exec('a', "ip link show lan0 | grep -q 'state UP'"), 0);
  // A second after the last flap, traffic crosses again in full.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(probe());
  EXPECT_NE(log().find("port lan: link down"), std::string::npos) << log();
}

// The steering program is removed from both interfaces behind vecflowd's back (wan0: vecflow's
// own AF_XDP socket; lan0: DPDK's net_af_xdp). Within a second vecflowd notices, puts the
// same program back (its maps and sockets with it) and says so in `steering`; lifting resumes.
TEST_F(Faults, DetachedSteeringProgramIsReattachedWithinASecond) {
  for (const std::string ifname : {"wan0", "lan0"}) {
    const std::string port_name = ifname == "wan0" ? "wan" : "lan";
    Json before = steering_port(port_name);
    ASSERT_EQ(before["state"], "attached") << before.dump();
    ASSERT_EQ(lab_->exec('a', "ip link set dev " + ifname + " xdp off"), 0);
    auto t0 = std::chrono::steady_clock::now();
    Json now;
    while (std::chrono::steady_clock::now() - t0 < 1s) {
      now = steering_port(port_name);
      if (now["reattaches"] == before["reattaches"].get<uint64_t>() + 1) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(now["reattaches"], before["reattaches"].get<uint64_t>() + 1) << now.dump();
    EXPECT_EQ(now["detaches"], before["detaches"].get<uint64_t>() + 1) << now.dump();
    EXPECT_EQ(now["state"], "attached");
    EXPECT_EQ(lab_->exec('a', "ip -d link show " + ifname + " | grep -q 'prog/xdp'"), 0);
  }
  EXPECT_TRUE(probe());
  Json acc = settled_accounting();
  expect_exact(acc);
  EXPECT_NE(log().find("steering program re-attached to wan0"), std::string::npos) << log();
}

// Another tool's program put in the steering program's place (atomically, `ip -force`) is
// an operator's deliberate change: vecflowd reports it and does not overwrite it.
TEST_F(Faults, ForeignProgramInItsPlaceIsReportedNotOverwritten) {
  const std::string foreign = "/usr/lib/x86_64-linux-gnu/bpf/xdpfilt_alw_all.o";
  if (access(foreign.c_str(), R_OK) != 0) GTEST_SKIP() << foreign << " (xdp-tools) is missing";
  ASSERT_EQ(lab_->exec('a', "ip -force link set dev wan0 xdp obj " + foreign + " sec xdp"), 0);
  std::this_thread::sleep_for(3 * 200ms);
  Json st = steering_port("wan");
  EXPECT_EQ(st["state"], "replaced") << st.dump();
  EXPECT_EQ(st["detaches"], 1u);
  EXPECT_EQ(st["reattaches"], 0u);
  EXPECT_NE(lab_->exec_output('a', "ip -d link show wan0").find("xdpfilt_alw_all"),
            std::string::npos);
  // Removing it hands the interface back: the steering program returns.
  ASSERT_EQ(lab_->exec('a', "ip link set dev wan0 xdp off"), 0);
  std::this_thread::sleep_for(3 * 200ms);
  st = steering_port("wan");
  EXPECT_EQ(st["state"], "attached") << st.dump();
  EXPECT_EQ(st["reattaches"], 1u);
  EXPECT_TRUE(probe());
}

class FaultsExitOnDetach : public Faults {
 protected:
  std::string edit_config(std::string text) override {
    return std::regex_replace(text, std::regex("\nsteering:\n"),
                              "\nsteering:\n  on_detach: exit\n");
  }
};

// With steering.on_detach: exit, a removed program stops vecflowd with an error naming the
// interface (systemd's Restart=on-failure then starts it from a clean state).
TEST_F(FaultsExitOnDetach, RemovedProgramStopsTheApplianceWithAnError) {
  ASSERT_EQ(lab_->exec('a', "ip link set dev wan0 xdp off"), 0);
  auto t0 = std::chrono::steady_clock::now();
  while (daemon_->alive() && std::chrono::steady_clock::now() - t0 < 5s)
    std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(daemon_->alive());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(daemon_->stop(), 2);
  daemon_.reset();
  EXPECT_NE(log().find("steering program was removed from wan0"), std::string::npos) << log();
}

// SIGTERM in the middle of a flood: vecflowd stops receiving, carries what is in flight to
// its end and exits 0; the final counters it logs add up on every port.
TEST_F(Faults, SigtermUnderLoadDrainsAndTheFinalCountersAddUp) {
  FloodResult r = flood(0, 3, [&] {
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(daemon_->stop(), 0);
  });
  EXPECT_GT(r.sent, 0u);
  std::string text = log();
  daemon_.reset();
  EXPECT_NE(text.find("stopped cleanly"), std::string::npos) << text;
  std::regex line("final accounting: port (\\w+): rx=(\\d+) .* unaccounted=(-?\\d+)");
  std::set<std::string> seen;
  for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
    seen.insert((*it)[1]);
    EXPECT_EQ((*it)[3], "0") << it->str();
    if ((*it)[1] == "wan") {
      EXPECT_GT(std::stoull((*it)[2]), 0u) << it->str();
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"wan", "lan"})) << text;
}

// SIGKILL leaves the steering programs attached; a new vecflowd on the same file replaces
// them, so each interface runs exactly one program, the new one's, and forwarding works.
TEST_F(Faults, SigkillAndRestartLeaveOneSteeringProgramPerInterface) {
  ASSERT_EQ(kill(daemon_->pid(), SIGKILL), 0);
  auto t0 = std::chrono::steady_clock::now();
  while (daemon_->alive() && std::chrono::steady_clock::now() - t0 < 5s)
    std::this_thread::sleep_for(50ms);
  ASSERT_FALSE(daemon_->alive());
  daemon_.reset();
  std::string stale = lab_->exec_output('a', "ip -d link show wan0");
  EXPECT_NE(stale.find("prog/xdp"), std::string::npos) << "SIGKILL detached the program?";

  std::filesystem::rename(dir_ + "/vecflowd.log", dir_ + "/vecflowd-killed.log");
  daemon_ = std::make_unique<Daemon>(*lab_, VECFLOWD_PATH, dir_ + "/appliance.yaml",
                                     dir_ + "/vecflowd.log");
  ASSERT_TRUE(daemon_->wait_ready(socket_)) << log();
  for (const std::string ifname : {"wan0", "lan0"}) {
    std::string out = lab_->exec_output('a', "ip -d link show " + ifname);
    size_t n = 0;
    for (size_t at = out.find("prog/xdp id"); at != std::string::npos;
         at = out.find("prog/xdp id", at + 1))
      ++n;
    EXPECT_EQ(n, 1u) << out;
    Json st = steering_port(ifname == "wan0" ? "wan" : "lan");
    ASSERT_TRUE(st.contains("state")) << st.dump();
  }
  // No libxdp pin directory of an interface is left pointing at a program that is gone.
  EXPECT_EQ(sh("for d in /sys/fs/bpf/xdp/dispatch-*; do [ -e \"$d\" ] || continue; "
               "id=${d##*-}; bpftool prog show id $id >/dev/null 2>&1 || exit 1; done"),
            0);
  ASSERT_TRUE(wait_neighbours());
  EXPECT_TRUE(probe());
}

// The control socket abused while a flood crosses the box: 1 000 malformed requests (on one
// connection and on fresh ones), oversized (1 MiB) requests, 256 clients at once, clients
// that connect and say nothing, and a client that sends a byte at a time. Every abuse gets an
// error reply or a close, `status` keeps answering, no packet of the flood is lost, and once
// the silent clients time out vecflowd holds no more descriptors than before.
TEST_F(Faults, ControlSocketAbuseUnderLoadDoesNotTouchForwarding) {
  const pid_t pid = daemon_->pid();
  const size_t fds0 = open_descriptors(pid);
  const uint64_t rss0 = resident_kib(pid);
  size_t malformed_errors = 0, oversized_closed = 0, crowd_answered = 0, crowd_busy = 0,
         crowd_odd = 0;
  std::string odd_reply;  // the first crowd reply that was neither a result nor a refusal
  double crowd_s = 0;
  bool status_answered = true;
  FloodResult r = flood(20000, 10, [&] {
    const std::vector<std::string> bad = {"{not json\n",
                                          "\x01\x02\xff\n",
                                          "[]\n",
                                          R"({"version":1,"command":42})"
                                          "\n",
                                          R"({"version":1,"command":"nope"})"
                                          "\n",
                                          R"({"version":99,"command":"status"})"
                                          "\n"};
    ControlClient one(socket_);
    ASSERT_TRUE(one.ok());
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(one.send(bad[i % bad.size()]));
      std::string reply = one.reply();
      malformed_errors += reply.find("\"error\"") != std::string::npos;
    }
    for (int i = 0; i < 500; ++i) {
      ControlClient c(socket_);
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE(c.send(bad[i % bad.size()]));
      malformed_errors += c.reply().find("\"error\"") != std::string::npos;
    }
    for (int i = 0; i < 4; ++i) {
      ControlClient c(socket_);
      ASSERT_TRUE(c.ok());
      c.send(std::string(1 << 20, 'x'));  // may fail part-way: the server closes early
      std::string reply = c.reply();
      oversized_closed += reply.empty() || reply.find("\"error\"") != std::string::npos;
    }
    std::vector<std::unique_ptr<ControlClient>> silent;
    for (int i = 0; i < 50; ++i)
      silent.push_back(std::make_unique<ControlClient>(socket_));
    // Connected here, before the crowd: one of the connections the server serves, whenever
    // its thread runs.
    auto slow_client = std::make_unique<ControlClient>(socket_);
    ASSERT_TRUE(slow_client->ok());
    std::thread slow([&] {
      ControlClient& c = *slow_client;
      std::string req = R"({"version":1,"command":"status"})"
                        "\n";
      for (char ch : req) {
        c.send(std::string_view(&ch, 1));
        std::this_thread::sleep_for(20ms);
      }
      const std::string reply = c.reply();
      EXPECT_NE(reply.find("\"result\""), std::string::npos) << reply << c.ended();
    });
    const auto crowd_start = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<ControlClient>> crowd;
    for (int i = 0; i < 256; ++i)
      crowd.push_back(std::make_unique<ControlClient>(socket_));
    for (auto& c : crowd)
      c->send(R"({"version":1,"command":"status"})"
              "\n");
    for (auto& c : crowd) {
      std::string reply = c->reply();
      const bool answered = reply.find("\"result\"") != std::string::npos;
      crowd_answered += answered;
      // Beyond 256 connections: `busy`; a request the loaded control lcore reached after
      // control.read_timeout_ms: `timeout` (under ASan). Never silence.
      const bool refused = reply.find(R"("code":"busy")") != std::string::npos ||
                           reply.find(R"("code":"timeout")") != std::string::npos;
      crowd_busy += refused;
      if (!answered && !refused) {
        ++crowd_odd;
        if (odd_reply.empty()) odd_reply = "'" + reply + "' (" + c->ended() + ")";
      }
    }
    crowd.clear();
    crowd_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - crowd_start).count();
    status_answered = ctl("status").rc == 0;
    slow.join();
  });
  EXPECT_EQ(malformed_errors, 1000u);
  EXPECT_EQ(oversized_closed, 4u);
  EXPECT_EQ(crowd_answered + crowd_busy, 256u) << odd_reply;
  EXPECT_GT(crowd_answered, 0u);
  EXPECT_TRUE(status_answered);
  EXPECT_EQ(r.received, r.sent) << "the flood lost packets while the control socket was abused";
  EXPECT_EQ(r.reordered, 0u);
  // The silent clients are dropped after control.read_timeout_ms (5 s).
  size_t fds = 0;
  for (int i = 0; i < 100 && (fds = open_descriptors(pid)) > fds0; ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_LE(fds, fds0);
#ifndef VECFLOW_SANITIZE  // ASan's quarantine keeps freed memory resident by design
  EXPECT_LT(resident_kib(pid), rss0 + 16 * 1024) << "resident memory grew by more than 16 MiB";
#endif
  std::cout << "control abuse: 1000 malformed, 4 x 1 MiB, 256 at once (" << crowd_answered
            << " answered, " << crowd_busy << " busy or timed out, " << crowd_odd << " other "
            << odd_reply << ", in " << crowd_s << " s), 50 silent, 1 slow; flood " << r.received
            << "/" << r.sent << "; descriptors " << fds0 << " -> " << fds << ", RSS " << rss0
            << " -> " << resident_kib(pid) << " KiB\n";
}

// 100 reloads that change the pipeline's tables (a route the flood does not use, added and
// removed) while a flood crosses the box: none loses or reorders a packet. Then the bad
// reloads, each refused with the running configuration untouched and still forwarding.
TEST_F(Faults, HundredReloadsUnderLoadLoseNothingAndBadOnesChangeNothing) {
  const std::string path = dir_ + "/appliance.yaml";
  const std::string original = [&] {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  const std::string with_route = std::regex_replace(
      original, std::regex("\n      - \\{prefix: 192.0.2.0/24, port: wan\\}"),
      "\n      - {prefix: 192.0.2.0/24, port: wan}\n      - {prefix: 203.0.113.0/24, port: wan}");
  ASSERT_NE(with_route, original);
  const std::string hash0 = json("status")["config"]["hash"];
  int reloads_ok = 0;
  FloodResult r = flood(20000, 12, [&] {
    for (int i = 0; i < 100; ++i) {
      std::ofstream(path) << (i % 2 == 0 ? with_route : original);
      Exec e = ctl("reload");
      reloads_ok += e.rc == 0;
    }
  });
  EXPECT_EQ(reloads_ok, 100);
  EXPECT_EQ(r.received, r.sent) << "reloads lost packets";
  EXPECT_EQ(r.reordered, 0u);
  EXPECT_EQ(json("status")["config"]["hash"], hash0) << "the 100th reload restored the original";

  // What each bad file is, the file, and a phrase its refusal must carry.
  struct Bad {
    std::string what, text, why;
  };
  const std::vector<Bad> bad = {
      {"syntax error", original + "\npipeline: [\n", "appliance.yaml:"},
      {"unknown key",
       std::regex_replace(original, std::regex("\nscheduler:\n"), "\nscheduler:\n  colour: blue\n"),
       "colour"},
      {"wrong type", std::regex_replace(original, std::regex("size: 64"), "size: large"),
       "scheduler.vector.size"},
      {"deep nesting", original + "\nx: " + std::string(2000, '[') + std::string(2000, ']') + "\n",
       "appliance.yaml"},
      {"alias bomb",
       original + "\na: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "e: [*d, *d, *d, *d, *d, *d, *d, *d]\n",
       "appliance.yaml"},
      {"unknown port", std::regex_replace(original, std::regex("port: lan\\}"), "port: nowhere}"),
       "nowhere"},
      {"path escaping",
       std::regex_replace(original, std::regex("\ncontrol:\n"),
                          "  - stage: mirror\n    fuse: true\n"
                          "    to: {pcapng: ../../etc/evil.pcapng}\n\ncontrol:\n"),
       "outside control.capture_dir"},
  };
  int refused = 0;
  FloodResult r2 = flood(20000, 3, [&] {
    for (const auto& b : bad) {
      ASSERT_NE(b.text, original) << b.what;
      std::ofstream(path) << b.text;
      Exec e = ctl("reload");
      EXPECT_NE(e.rc, 0) << b.what << " was accepted: " << e.out;
      EXPECT_NE((e.out + e.err).find(b.why), std::string::npos) << b.what << ": " << e.out << e.err;
      refused += e.rc != 0;
      EXPECT_EQ(json("status")["config"]["hash"], hash0) << b.what;
    }
  });
  std::ofstream(path) << original;
  EXPECT_EQ(refused, static_cast<int>(bad.size()));
  EXPECT_EQ(r2.received, r2.sent) << "a refused reload disturbed forwarding";
  expect_exact(settled_accounting());
}

// Overload: the generator sends as fast as it can (on this 2-core machine about what vecflowd
// forwards, not twice: both share the cores) for VECFLOW_OVERLOAD_SECONDS (default 10; the
// documented long run uses 60). vecflowd survives, its resident memory stays flat after a
// warm-up, and every packet it could not carry is counted under a reason.
// Two pipeline workers (lcores 0 and 1) share the flows; both ports are polled on lcore 0.
// Fault injection is on, so a test can stall lcore 1. Four 2048-entry fill rings keep 8192
// buffers posted: the pool is doubled so that the workers' backlogs have buffers of their own.
class FaultsStall : public Faults {
 protected:
  int lab_queues() const override { return 2; }
  std::string edit_config(std::string text) override {
    text = std::regex_replace(text, std::regex("\n  workers: \\[1\\]\n"), "\n  workers: [0, 1]\n");
    text = std::regex_replace(text, std::regex("\n    queues: 1\n"),
                              "\n    queues: 2\n    lcore: 0\n");
    text = std::regex_replace(text,
                              std::regex("\n    queues:\n      - \\{queues: 0, owner: dpdk\\}\n"),
                              "\n    queues: 2\n    lcore: 0\n");
    text = std::regex_replace(text, std::regex("mbufs: 8192"), "mbufs: 16384");
    return std::regex_replace(text, std::regex("\ncontrol:\n"),
                              "\ncontrol:\n  fault_injection: true\n");
  }

  static Json row(const Json& rows, const std::string& key, const Json& value) {
    for (const auto& r : rows)
      if (r[key] == value) return r;
    return Json();
  }
  uint64_t worker_events(const std::string& lcore) {
    const Json sched = json("sched");
    return row(sched["workers"], "lcore", lcore)["events"].get<uint64_t>();
  }
  uint64_t wan_tx() { return port(json("accounting")["ports"], "wan")["tx_packets"]; }
};

// Lcore 1, one of the two workers, is stalled for 2 s in the middle of a flood (a service
// stuck in a system call). While it lasts `status` and `sched` show it and the flows of the
// other worker keep moving; afterwards every packet is accounted for: forwarded late, or
// dropped as sched_backpressure when the stalled worker's share of the scheduler was full.
TEST_F(FaultsStall, AStalledWorkerIsShownAndTheOtherWorkersFlowsKeepMoving) {
  Json acc0 = settled_accounting();
  auto drops0 = wan_drops();
  Json during_status, during_sched;
  uint64_t moved = 0, stuck_events = 0;
  double window_s = 0, window_end_s = 0;
  const double rate = 20000;
#ifdef VECFLOW_SANITIZE
  // Each vecflowctl call takes a few hundred ms under ASan: the observations below need longer
  // than 2 s to fit inside the stall.
  const int stall_ms = 5000;
#else
  const int stall_ms = 2000;
#endif
  FloodResult r = flood(rate, 4 + stall_ms / 1000.0, [&] {
    std::this_thread::sleep_for(1500ms);
    const uint64_t w0 = worker_events("0"), w1 = worker_events("1");
    EXPECT_GT(w0, 0u) << "worker on lcore 0 got no flow";
    EXPECT_GT(w1, 0u) << "worker on lcore 1 got no flow";
    const auto t0 = std::chrono::steady_clock::now();
    Exec stall = ctl("call fault-stall lcore=1 ms=" + std::to_string(stall_ms));
    ASSERT_EQ(stall.rc, 0) << stall.out << stall.err;
    std::this_thread::sleep_for(300ms);
    during_status = json("status");
    during_sched = json("sched");
    const uint64_t tx_a = wan_tx(), ev_a = worker_events("1");
    const auto ta = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1000ms);
    moved = wan_tx() - tx_a;
    stuck_events = worker_events("1") - ev_a;
    const auto tb = std::chrono::steady_clock::now();
    window_s = std::chrono::duration<double>(tb - ta).count();
    window_end_s = std::chrono::duration<double>(tb - t0).count();
  });
  ASSERT_TRUE(daemon_->alive()) << log();

  const Json l1 = row(during_status["lcores"], "lcore", 1);
  EXPECT_EQ(l1["state"], "stalled") << during_status.dump();
  EXPECT_GE(l1["round_s"].get<double>(), 0.25) << during_status.dump();
  EXPECT_EQ(row(during_status["lcores"], "lcore", 0)["state"], "running");
  EXPECT_EQ(row(during_sched["workers"], "lcore", "1")["state"], "stalled") << during_sched.dump();
  EXPECT_EQ(row(during_sched["workers"], "lcore", "0")["state"], "running");
  // In a second or more of the stall: the stalled worker handled nothing, the other one
  // carried its flows (about half of the offered rate; a quarter leaves room for an uneven
  // split). Under ASan the vecflowctl calls of the test take lcore 0 (control and the other
  // worker) for hundreds of ms each: a tenth there.
#ifdef VECFLOW_SANITIZE
  const double least = rate / 10;
#else
  const double least = rate / 4;
#endif
  ASSERT_LT(window_end_s, stall_ms / 1000.0) << "the observations took longer than the stall";
  EXPECT_EQ(stuck_events, 0u);
  EXPECT_GT(static_cast<double>(moved) / window_s, least) << "the other worker's flows stopped too";

  Json acc = settled_accounting();
  expect_exact(acc);
  auto lost = delta(drops0, wan_drops());
  const Json& w0 = port(acc0, "wan");
  const Json& w = port(acc, "wan");
  const uint64_t kernel =
      w["kernel_packets"].get<uint64_t>() - w0["kernel_packets"].get<uint64_t>();
  const uint64_t backpressure =
      lost.count("sched_backpressure/userspace") ? lost["sched_backpressure/userspace"] : 0;
  std::cout << "stall of " << stall_ms << " ms: sent " << r.sent << ", received " << r.received
            << ", sched_backpressure " << backpressure << ", kernel " << kernel
            << ", forwarded by the other worker in " << window_s << " s of the stall " << moved
            << ", lost " << Json(lost).dump() << "\n";
  for (const auto& [reason, n] : lost)
    EXPECT_EQ(reason, "sched_backpressure/userspace") << n << " packets";
  // Every flood packet arrived or was dropped for backpressure. The drops and `kernel` (packets
  // the pipeline handed to the kernel) may also hold a few of the hosts' own frames (IPv6
  // neighbour discovery, MLD), hence the slack of 10.
  EXPECT_LE(r.received + backpressure, r.sent + 10) << Json(lost).dump();
  EXPECT_GE(r.received + backpressure + kernel, r.sent) << Json(lost).dump();
  EXPECT_EQ(r.socket_drops, 0u);

  const Json lcores = json("lcores");
  const Json after = row(lcores["lcores"], "lcore", 1);
  EXPECT_EQ(after["state"], "running");
  EXPECT_EQ(after["stalls"], 1);
  // Measured in TSC cycles, converted with the TSC rate measured at start (within 1%).
  EXPECT_GE(after["stalled_s"].get<double>(), 0.975 * stall_ms / 1000.0);
  EXPECT_NE(log().find("lcore 1 stalled"), std::string::npos) << log();
  std::smatch resumed;
  const std::string text = log();
  ASSERT_TRUE(
      std::regex_search(text, resumed, std::regex("lcore 1 resumed after a stall of ([0-9.]+) s")))
      << text;
  EXPECT_GE(std::stod(resumed[1]), 0.975 * stall_ms / 1000.0) << resumed[0];
  EXPECT_TRUE(probe());
}

// The stateful pipeline on the two workers: conntrack with source NAT (the client's flows leave
// toward the server from the box's lan address), then route, under overload. The builtin
// scheduler moves flow buckets between the busy workers, sessions with them (their state is
// owned by the bucket): every flow keeps its order through the moves, every packet is received
// or counted, and each flow has one session and one mapping.
class FaultsNat : public FaultsStall {
 protected:
  std::string edit_config(std::string text) override {
    return replace_demo_acl(FaultsStall::edit_config(std::move(text)), R"(  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: wan, src: 192.0.2.0/24, to: 198.51.100.1, ports: 20000-29999})");
  }
  uint64_t migrations() { return json("sched")["migrations"].get<uint64_t>(); }
};

TEST_F(FaultsNat, TranslatedFlowsKeepTheirOrderAndMappingWhileBucketsMove) {
  const uint64_t migrations0 = migrations();
  auto drops0 = wan_drops();
  // As fast as two senders go: both workers busy, the scheduler balancing them.
  FloodResult r = flood(
      0, 3, [] {}, 128, 2, true);
  const uint64_t moved = migrations() - migrations0;
  auto lost = delta(drops0, wan_drops());
  std::cout << "NAT on two workers: sent " << r.sent << ", received " << r.received
            << ", reordered " << r.reordered << ", bucket migrations " << moved << ", drops "
            << Json(lost).dump() << "\n";
  EXPECT_GT(moved, 0u) << "no flow bucket changed workers: the test shows nothing";
  EXPECT_EQ(r.reordered, 0u);
  // Overload is dropped, every drop counted under its reason (the rings, the pool, the
  // scheduler), never lost: what arrived and what was counted make what was sent. The hosts'
  // own frames (IPv6 neighbour discovery) may add a few drops, hence the slack.
  uint64_t counted = 0;
  for (const auto& [reason, n] : lost)
    counted += n;
  EXPECT_LE(r.received + counted, r.sent + 10) << Json(lost).dump();
  EXPECT_GE(r.received + counted, r.sent) << Json(lost).dump();
  expect_exact(settled_accounting());
  // One session per flow, each translated once, to the lan address.
  const Json sessions =
      json("sessions --address 198.51.100.2 --port " + std::to_string(kFloodPort) + " --top 1000");
  EXPECT_EQ(sessions["matched"], 256) << sessions.dump().substr(0, 2000);
  const Json m = json("metrics --family vecflow_nat_ports_in_use");
  EXPECT_NE(m.dump().find("198.51.100.1"), std::string::npos) << m.dump();
}

// An interface deleted under vecflowd: its port shows down, and the steering program's failed
// re-attachments (tried every 200 ms) are logged with back-off: the first, then after 1 s,
// 2 s, 4 s ... with the count of the ones not logged.
TEST_F(Faults, AVanishedInterfaceIsReportedWithBackOffAndItsPortIsDown) {
  ASSERT_EQ(lab_->exec('a', "ip link del wan0"), 0);
  std::this_thread::sleep_for(3500ms);
  Json status = json("status");
  for (const auto& p : status["ports"]) {
    if (p["name"] == "wan") {
      EXPECT_EQ(p["state"], "down") << p.dump();
    }
  }
  const std::string text = log();
  size_t lines = 0;
  for (size_t at = 0; (at = text.find("re-attaching the steering program to wan0 failed", at)) !=
                      std::string::npos;
       ++at)
    ++lines;
  // 0 s, 1 s, 3 s: three lines in 3.5 s, where every attempt would have been 17.
  EXPECT_GE(lines, 2u) << text;
  EXPECT_LE(lines, 3u) << text;
  EXPECT_NE(text.find("more failed attempts not logged"), std::string::npos) << text;
  EXPECT_NE(text.find("port wan: link down"), std::string::npos) << text;
}

// The fault commands exist in every vecflowd, and do nothing unless the file asks for them.
TEST_F(Faults, FaultInjectionIsOffUnlessTheConfigurationTurnsItOn) {
  Exec r = ctl("call fault-stall lcore=1 ms=100");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE((r.out + r.err).find("fault injection is off"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(json("lcores")["lcores"][1]["stalls"], 0);
}

TEST_F(Faults, OverloadIsCountedAndMemoryStaysFlat) {
  const char* env = std::getenv("VECFLOW_OVERLOAD_SECONDS");
  const double seconds = env ? std::atof(env) : 10;
  const pid_t pid = daemon_->pid();
  // Warm-up (every buffer and ring touched once) and capacity: what vecflowd forwards of one
  // full-rate sender (on 2 vCPUs shared with the generator this is about what the sender
  // offers; reported, not asserted).
  const FloodResult warm = flood(0, 2, [] {});
  const double capacity = static_cast<double>(warm.received) / 2;
  const uint64_t rss0 = resident_kib(pid);
  auto drops0 = wan_drops();
  uint64_t rss_max = rss0;
  // Three senders at full rate: one alone offers about what vecflowd forwards here (they share
  // the 2 vCPUs with it); three offer more than it can take and take CPU from it as well,
  // which is part of overload.
  FloodResult r = flood(
      0, seconds,
      [&] {
        for (int i = 0; i < int(seconds); ++i) {
          std::this_thread::sleep_for(1s);
          rss_max = std::max(rss_max, resident_kib(pid));
        }
      },
      64, 3);
  ASSERT_TRUE(daemon_->alive()) << log();
  const double offered = static_cast<double>(r.sent) / seconds;
  EXPECT_GT(r.sent, r.received) << "no overload: everything offered was forwarded";
  Json acc = settled_accounting();
  expect_exact(acc);
  auto lost = delta(drops0, wan_drops());
  // The reasons overload has (the hosts' own frames, IPv6 neighbour discovery and the like,
  // may add a few drops of other reasons: they are not the flood's).
  uint64_t dropped = 0;
  for (const auto& [reason, n] : lost) {
    for (const char* r : {"nombuf/", "xsk_ring_full/", "sched_backpressure/", "tx_full/"})
      if (reason.rfind(r, 0) == 0) dropped += n;
  }
  // Device drops are counted per interface, not per rule: a frame of the hosts' own that met
  // a full ring is among them, so they may exceed the flood's by a few, never fall short.
  EXPECT_GE(r.received + dropped, r.sent) << "flood packets vanished: " << Json(lost).dump();
  EXPECT_LE(r.received + dropped, r.sent + 100) << Json(lost).dump();
  EXPECT_EQ(r.socket_drops, 0u);
#ifndef VECFLOW_SANITIZE  // ASan's quarantine keeps freed memory resident by design
  EXPECT_LT(rss_max, rss0 + 8 * 1024) << "resident memory grew under overload";
#endif
  std::cout << "overload " << seconds << " s: capacity " << capacity << " pps, offered " << offered
            << " pps (" << offered / std::max(capacity, 1.0) << "x), forwarded "
            << r.received / seconds << " pps (offered/forwarded "
            << offered / std::max(static_cast<double>(r.received) / seconds, 1.0) << "x), dropped "
            << Json(lost).dump() << ", RSS " << rss0 << " -> max " << rss_max << " KiB\n";
}

}  // namespace
}  // namespace vecflow::test
