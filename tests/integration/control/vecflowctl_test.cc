// vecflowctl against a running vecflowd in the lab's appliance namespace: every command this
// vecflowd serves, human and JSON output, counters that follow what the test did, reload (good,
// bad, SIGHUP, confirm-within), the metrics endpoint against the JSON, DPDK telemetry, many
// clients at once, and socket permissions for users outside the control group.
//
// vecflowd runs with the lab's interfaces declared as ports (the demo's: AF_XDP on wan0, DPDK's
// net_af_xdp on lan0).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/command_spec.h"
#include "config/config.h"
#include "core/drop_reason.h"
#include "pipeline/stage_registry.h"
#include "support/daemon.h"
#include "support/lab.h"

namespace vecflow::test {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using control::CommandCatalogue;
using control::CommandSpec;

std::string config_text(const std::string& name, const std::string& prefix,
                        const std::string& socket, const std::string& group,
                        const std::string& extra = "") {
  return "appliance: {name: " + name + "}\n" +
         "cpu: {control: 0, workers: [1]}\n"
         "dpdk: {memory_mb: 128, hugepages: off, file_prefix: " +
         prefix +
         "}\n"
         "ports:\n"
         "  - {name: wan, type: afxdp, interface: wan0}\n"
         "  - {name: lan, type: afxdp, interface: lan0, queues: [{queues: 0, owner: dpdk}]}\n"
         "steering:\n"
         "  rules:\n"
         "    - {name: arp, match: {l3: arp}, action: pass}\n"
         "    - {name: ssh, match: {proto: tcp, dst_port: 22}, action: pass}\n"
         "pipeline:\n"
         "  - stage: route\n"
         "    routes:\n"
         "      - {prefix: 198.51.100.0/24, port: lan}\n"
         "      - {prefix: 192.0.2.0/24, port: wan}\n"
         "  - {stage: neighbour, fuse: true, from_kernel: true}\n"
         "control:\n"
         "  socket: " +
         socket +
         "\n"
         "  group: \"" +
         group +
         "\"\n"
         "  metrics: 127.0.0.1:9469\n"
         "  read_timeout_ms: 1000\n" +
         extra;
}

// A throwaway group and users, removed on destruction.
class Accounts {
 public:
  explicit Accounts(const std::string& tag)
      : group_(tag + "g"), inside_(tag + "i"), outside_(tag + "o") {
    ok_ = sh("groupadd " + group_) == 0 &&
          sh("useradd -M -N -s /usr/sbin/nologin -G " + group_ + " " + inside_) == 0 &&
          sh("useradd -M -N -s /usr/sbin/nologin " + outside_) == 0;
  }
  ~Accounts() {
    sh("userdel " + inside_ + " 2>/dev/null");
    sh("userdel " + outside_ + " 2>/dev/null");
    sh("groupdel " + group_ + " 2>/dev/null");
  }
  bool ok() const { return ok_; }
  const std::string& group() const { return group_; }
  const std::string& inside() const { return inside_; }
  const std::string& outside() const { return outside_; }

 private:
  std::string group_, inside_, outside_;
  bool ok_ = false;
};

std::string http_get(const std::string& ns, const std::string& path) {
  NetnsScope scope(ns);
  if (!scope.ok()) return "";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(9469);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char b[8192];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 5000) > 0) {
    ssize_t n = recv(fd, b, sizeof(b), 0);
    if (n <= 0) break;
    out.append(b, static_cast<size_t>(n));
  }
  close(fd);
  auto body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// One lab, one vecflowd, shared by the tests of this suite (starting EAL per test would be
// slow); each test leaves the daemon as it found it.
class VecflowctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!can_use_netns()) return;
    name_ = unique_name("vct");
    lab_ = new Lab(name_);
    char tmpl[] = "/tmp/vct-ctl-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all |
                                           std::filesystem::perms::group_exec |
                                           std::filesystem::perms::others_exec);
    accounts_ = new Accounts(name_);
    socket_ = dir_ + "/run/control.sock";
    prefix_ = name_ + "-eal";
    config_ = dir_ + "/appliance.yaml";
    std::ofstream(config_) << config_text("vct-lab", prefix_, socket_,
                                          accounts_->ok() ? accounts_->group() : "");
    daemon_ = new Daemon(*lab_, VECFLOWD_PATH, config_, dir_ + "/vecflowd.log");
    ready_ = lab_->ok() && daemon_->wait_ready(socket_);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete accounts_;
    delete lab_;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    daemon_ = nullptr;
    accounts_ = nullptr;
    lab_ = nullptr;
  }
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    ASSERT_TRUE(lab_->ok()) << "lab did not come up";
    ASSERT_TRUE(ready_) << "vecflowd did not start:\n" << log();
  }
  void TearDown() override { ASSERT_TRUE(daemon_->alive()) << "vecflowd died:\n" << log(); }

  static std::string log() {
    std::ifstream f(dir_ + "/vecflowd.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static Exec ctl(const std::string& args) {
    return run(std::string(VECFLOWCTL_PATH) + " -s " + socket_ + " " + args);
  }
  static Json json(const std::string& args) {
    Exec r = ctl("--json " + args);
    EXPECT_EQ(r.rc, 0) << args << ": " << r.err;
    return Json::parse(r.out, nullptr, false);
  }
  // Rewrites the running file with another appliance name (and optional extra YAML).
  static void rewrite(const std::string& name, const std::string& extra = "") {
    std::ofstream(config_) << config_text(name, prefix_, socket_,
                                          accounts_->ok() ? accounts_->group() : "", extra);
  }

  static inline std::string name_, dir_, socket_, prefix_, config_;
  static inline Lab* lab_ = nullptr;
  static inline Accounts* accounts_ = nullptr;
  static inline Daemon* daemon_ = nullptr;
  static inline bool ready_ = false;
};

TEST_F(VecflowctlTest, StatusHumanAndJson) {
  auto cfg = config::load_config(config_, builtin_stage_types());
  ASSERT_TRUE(cfg);
  // Attaching XDP to a veth drops its carrier for a few tens of milliseconds, and status
  // reports what the kernel says: wait for the link to come back.
  const std::regex wan_up("wan +afxdp +wan0 +up");
  Exec r = ctl("status");
  for (int i = 0; i < 40 && r.rc == 0 && !std::regex_search(r.out, wan_up); ++i) {
    std::this_thread::sleep_for(50ms);
    r = ctl("status");
  }
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("vct-lab"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(config_), std::string::npos);
  EXPECT_NE(r.out.find(cfg->hash), std::string::npos);
  EXPECT_TRUE(std::regex_search(r.out, wan_up)) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("uptime: +[0-9]")));

  Json s = json("status");
  EXPECT_EQ(s["name"], "vct-lab");
  EXPECT_EQ(s["pid"], daemon_->pid());
  EXPECT_EQ(s["config"]["hash"], cfg->hash);
  EXPECT_EQ(s["workers"], Json::array({1}));
  // One worker that polls every rx queue: the direct path, no scheduler.
  EXPECT_EQ(s["scheduler"]["path"], "direct");
  EXPECT_EQ(s["scheduler"]["backend"], "none");
  ASSERT_EQ(s["ports"].size(), 2u);
  EXPECT_EQ(s["ports"][1]["name"], "lan");
  // The control lcore serves the pipeline's kernel synchroniser, flow offload (off, but a
  // reload may turn it on) and the control plane; the worker lcore receives and runs the
  // pipeline in one service.
  EXPECT_EQ(s["lcores"][0]["services"], Json::array({"kernel-sync", "offload", "control"}));
  EXPECT_EQ(s["lcores"][1]["services"], Json::array({"direct1"}));
  EXPECT_GT(s["uptime_s"].get<double>(), 0);
  // --no-huge: no shared memory for dpdk-dumpcap, and status says why.
  EXPECT_FALSE(s["dpdk_tools"]["pdump"].get<bool>());
  EXPECT_NE(s["dpdk_tools"]["pdump_detail"].get<std::string>().find("dpdk.multiprocess"),
            std::string::npos);
}

TEST_F(VecflowctlTest, LcoresCountTheRequestsTheTestMade) {
  // Rates exist once the control plane has two samples (one sampling interval after start).
  Json a = json("lcores");
  for (int i = 0; i < 40 && a["interval_s"].get<double>() == 0; ++i) {
    std::this_thread::sleep_for(100ms);
    a = json("lcores");
  }
  auto busy_polls = [](const Json& j) {
    for (const auto& s : j["services"])
      if (s["service"] == "control") return s["busy_polls"].get<uint64_t>();
    return uint64_t{0};
  };
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(ctl("status").rc, 0);
  Json b = json("lcores");
  // Every request is at least one poll of the control service that did work.
  EXPECT_GE(busy_polls(b) - busy_polls(a), 6u);
  ASSERT_EQ(b["lcores"].size(), 2u);
  EXPECT_EQ(b["lcores"][0]["role"], "control");
  EXPECT_EQ(b["lcores"][1]["lcore"], 1);
  Exec h = ctl("lcores");
  EXPECT_TRUE(std::regex_search(h.out, std::regex("0 +control +[0-9.]+%"))) << h.out;
}

TEST_F(VecflowctlTest, ErrorsListEveryReasonAndAccountingBalances) {
  Json e = json("errors");
  ASSERT_EQ(e["reasons"].size(), kDropReasonCount);
  EXPECT_EQ(e["total"], 0);
  EXPECT_EQ(e["reasons"][0]["reason"], drop_reason_name(static_cast<DropReason>(0)));
  Exec h = ctl("errors");
  EXPECT_NE(h.out.find("dropped:"), std::string::npos);
  EXPECT_NE(h.out.find("at zero; --all shows them"), std::string::npos);
  Exec all = ctl("errors --all");
  EXPECT_NE(all.out.find("no_route"), std::string::npos);

  Json acc = json("accounting");
  ASSERT_EQ(acc["ports"].size(), 2u);
  // The hosts' kernels send a few frames of their own (IPv6 neighbour discovery); whatever
  // entered has ended somewhere.
  for (const auto& p : acc["ports"]) {
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(),
              p["tx_packets"].get<uint64_t>() + p["kernel_packets"].get<uint64_t>() +
                  p["dropped"].get<uint64_t>() + p["in_flight"].get<uint64_t>());
  }
}

TEST_F(VecflowctlTest, EveryPartIsServedAndAnUnknownCommandNamesTheKnownOnes) {
  Exec r = ctl("call no-such-command");
  EXPECT_EQ(r.rc, 5);
  EXPECT_NE(r.err.find("unknown command 'no-such-command'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("status"), std::string::npos);
  Json c = json("commands");
  std::vector<std::string> names;
  for (const auto& x : c["commands"])
    names.push_back(x["name"]);
  for (const char* n : {"status", "lcores", "errors", "accounting", "reload", "metrics", "steering",
                        "ports", "sched", "pipeline", "routes", "acl", "neighbours"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  // Each served command is the spec vecflowctl was built from: same summary and arguments, and
  // a subcommand of vecflowctl under its words.
  for (const auto& x : c["commands"]) {
    const CommandSpec* spec = CommandCatalogue::find(x["name"].get<std::string>());
    ASSERT_NE(spec, nullptr) << x.dump() << ": served but not in vecflowctl's specs";
    EXPECT_EQ(x["summary"], std::string(spec->summary));
    EXPECT_EQ(x["args"], spec->usage());
    if (spec->call_only) continue;
    std::string words;
    for (auto w : spec->words)
      words += std::string(w) + " ";
    if (spec->words.empty()) words = std::string(spec->name) + " ";
    Exec help = ctl(words + "--help");
    EXPECT_EQ(help.rc, 0) << words;
    EXPECT_TRUE(help.out.starts_with(std::string(spec->summary))) << help.out;
  }
}

// Steering counts what the test sends to the appliance's wan0, and a reload that changes a
// rule takes effect in XDP at once.
TEST_F(VecflowctlTest, SteeringCountsTrafficAndReloadChangesRules) {
  auto wan = [](const Json& j) {
    for (const auto& p : j["ports"])
      if (p["port"] == "wan") return p;
    return Json();
  };
  auto rule = [](const Json& j, const std::string& name) {
    for (const auto& r : j["rules"])
      if (r["rule"] == name) return r;
    return Json();
  };
  Json before = json("steering");
  ASSERT_TRUE(wan(before).is_object()) << before.dump();
  EXPECT_EQ(wan(before)["interface"], "wan0");
  ASSERT_EQ(lab_->exec('c', "ping -c 5 -i 0.2 -W 1 192.0.2.1 >/dev/null"), 0);
  lab_->exec('c', "nc -z -w 1 192.0.2.1 22");  // refused by the kernel: the SYN passed
  Json after = json("steering");
  // Five echo requests and one SYN at least (ARP and the TCP reset's neighbours add more).
  EXPECT_GE(wan(after)["rx_packets"].get<uint64_t>() - wan(before)["rx_packets"].get<uint64_t>(),
            6u);
  EXPECT_GE(rule(after, "ssh")["packets"].get<uint64_t>() -
                rule(before, "ssh")["packets"].get<uint64_t>(),
            1u);
  // The echo requests went to user space (the default), the SYN to the kernel (the rule).
  EXPECT_GE(wan(after)["userspace"].get<uint64_t>() - wan(before)["userspace"].get<uint64_t>(), 5u);
  EXPECT_GE(wan(after)["pass"].get<uint64_t>() - wan(before)["pass"].get<uint64_t>(), 1u);
  Exec human = ctl("steering");
  EXPECT_TRUE(std::regex_search(human.out, std::regex("wan +wan0 +[a-z ]+ +(native|generic)")))
      << human.out;
  EXPECT_TRUE(std::regex_search(human.out, std::regex("ssh +0 +pass +[1-9]"))) << human.out;

  // The same counter in /metrics.
  std::string text = http_get(lab_->ns('a'), "/metrics");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      text, m,
      std::regex("vecflow_steer_rule_hits_total\\{port=\"wan\",rule=\"ssh\"\\} ([0-9]+)")));
  EXPECT_GE(std::stoull(m[1]), rule(after, "ssh")["packets"].get<uint64_t>());

  // Reload: ssh now dropped in XDP.
  std::string extra;
  {
    std::ifstream f(config_);
    extra.assign(std::istreambuf_iterator<char>(f), {});
  }
  extra.replace(extra.find("dst_port: 22}, action: pass}"), 28, "dst_port: 22}, action: drop}");
  std::ofstream(config_) << extra;
  Json r = json("reload");
  EXPECT_EQ(r["applied"], Json::array({"steering"})) << r.dump();
  uint64_t drops_before = json("errors")["total"];
  EXPECT_NE(lab_->exec('c', "nc -z -w 1 192.0.2.1 22"), 0);  // no answer: dropped
  Json e = json("errors");
  EXPECT_GE(e["total"].get<uint64_t>() - drops_before, 1u);
  bool xdp_steer_drop = false;
  for (const auto& w : e["by_port"])
    xdp_steer_drop |= w["port"] == "wan" && w["reason"] == "steer_rule" && w["layer"] == "xdp";
  EXPECT_TRUE(xdp_steer_drop) << e["by_port"].dump();
  rewrite("vct-lab");
  ASSERT_EQ(ctl("reload").rc, 0);
  EXPECT_EQ(lab_->exec('c', "ping -c 1 -W 1 192.0.2.1 >/dev/null"), 0);
}

TEST_F(VecflowctlTest, NotRunningAndUsageErrorsHaveTheirExitCodes) {
  Exec r = run(std::string(VECFLOWCTL_PATH) + " -s " + dir_ + "/nothing.sock status");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("vecflowd is not running"), std::string::npos) << r.err;
  EXPECT_EQ(ctl("flows --by colour").rc, 2);
  EXPECT_EQ(ctl("call metrics nonsense").rc, 2);
  EXPECT_EQ(ctl("call metrics family=5").rc, 2);  // a number where a string is expected
  Exec bogus = ctl("bogus");
  EXPECT_EQ(bogus.rc, 2);
  EXPECT_NE(bogus.err.find("unknown command 'bogus'"), std::string::npos) << bogus.err;
  Exec extra = ctl("status now");
  EXPECT_EQ(extra.rc, 2);
  EXPECT_NE(extra.err.find("unexpected 'now'"), std::string::npos) << extra.err;
  Exec version = run(std::string(VECFLOWCTL_PATH) + " --version");
  EXPECT_EQ(version.rc, 0);
  EXPECT_TRUE(std::regex_search(version.out, std::regex("^vecflowctl [0-9]+\\.[0-9]+\\.[0-9]+")))
      << version.out;
}

// `clear` restarts what the commands show; /metrics (and `metrics`) stay monotonic, and
// `clear errors` leaves the other counters alone.
TEST_F(VecflowctlTest, ClearRestartsWhatCommandsShowAndMetricsStayMonotonic) {
  auto wan_rx = [] {
    const Json acc = json("accounting");
    for (const auto& p : acc["ports"])
      if (p["port"] == "wan") return p["rx_packets"].get<uint64_t>();
    return uint64_t{0};
  };
  auto metric_rx = [] {
    const Json metrics = json("metrics --family vecflow_accounting_rx_packets");
    for (const auto& m : metrics["samples"])
      if (m["labels"] == "port=wan") return m["value"].get<uint64_t>();
    return uint64_t{0};
  };
  // Thirty echo requests before the clear and three after: the hosts' kernels add a few frames
  // of their own (IPv6 neighbour discovery, MLD), never as many as the gap between the two.
  ASSERT_EQ(lab_->exec('c', "ping -q -c 30 -i 0.01 -W 1 192.0.2.1 >/dev/null"), 0);
  const uint64_t shown = wan_rx();
  const uint64_t monotonic = metric_rx();
  ASSERT_GE(shown, 30u);
  Exec cleared = ctl("clear");
  ASSERT_EQ(cleared.rc, 0) << cleared.err;
  EXPECT_NE(cleared.out.find("counters"), std::string::npos) << cleared.out;
  EXPECT_LT(wan_rx(), 10u);
  EXPECT_GE(metric_rx(), monotonic);
  ASSERT_EQ(lab_->exec('c', "ping -q -c 3 -i 0.2 -W 1 192.0.2.1 >/dev/null"), 0);
  const uint64_t since = wan_rx();
  EXPECT_GE(since, 3u);
  EXPECT_LT(since, 15u);
  EXPECT_GE(metric_rx(), monotonic + 3);

  // `clear errors`: drops restart, packets go on counting.
  ASSERT_EQ(ctl("clear errors").rc, 0);
  EXPECT_EQ(json("errors")["total"], 0);
  EXPECT_GE(wan_rx(), since);
  EXPECT_EQ(ctl("clear nothing").rc, 2);
}

// `buffers`: every pool with its states adding up, the AF_XDP fill rings' buffers lent to the
// kernel (taken from the packet pool, so counted in its IN USE), EAL's heap and the process.
TEST_F(VecflowctlTest, BuffersShowPoolsWhatTheKernelHoldsAndMemory) {
  const Json b = json("buffers");
  ASSERT_FALSE(b["pools"].empty()) << b.dump();
  uint64_t most_in_use = 0;
  for (const auto& p : b["pools"]) {
    EXPECT_EQ(p["size"].get<uint64_t>(),
              p["in_use"].get<uint64_t>() + p["cached"].get<uint64_t>() + p["free"].get<uint64_t>())
        << p.dump();
    EXPECT_GT(p["element_bytes"].get<uint64_t>(), 0u) << p.dump();
    most_in_use = std::max(most_in_use, p["in_use"].get<uint64_t>());
  }
  uint64_t lent = 0;
  for (const auto& q : b["lent_to_kernel"]) {
    EXPECT_EQ(q["port"], "wan") << "lan's queue is DPDK's (net_af_xdp), not a socket of vecflow's";
    lent += q["buffers"].get<uint64_t>();
  }
  EXPECT_GT(lent, 0u) << b.dump();  // wan's fill ring is kept full
  EXPECT_GE(most_in_use, lent) << b.dump();
  ASSERT_FALSE(b["heaps"].empty()) << b.dump();
  EXPECT_GT(b["heaps"][0]["allocated_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(b["process"]["resident_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_GT(b["process"]["open_fds"].get<uint64_t>(), 3u);

  Exec human = ctl("buffers");
  EXPECT_NE(human.out.find("pools:"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("resident:"), std::string::npos) << human.out;
  const std::string text = http_get(lab_->ns('a'), "/metrics");
  EXPECT_NE(text.find("\nprocess_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(text.find("\nprocess_cpu_seconds_total "), std::string::npos);
  EXPECT_NE(text.find("vecflow_buffer_pool_buffers{pool="), std::string::npos);
}

// Levels change per part at run time, the change is logged, and `log show` has the lines.
TEST_F(VecflowctlTest, LogLevelsChangeAtRunTimeAndTheLastLinesAreShown) {
  auto level_of = [](const Json& j, const std::string& part) {
    for (const auto& l : j["levels"])
      if (l["part"] == part) return l["level"].get<std::string>();
    return std::string("absent");
  };
  Json before = json("log");
  EXPECT_EQ(level_of(before, "steer"), "info");
  ASSERT_FALSE(before["lines"].empty());
  // The daemon's start is in memory: the control socket line is among the first ones.
  Json all = json("log show -n 1000");
  bool started = false;
  for (const auto& l : all["lines"])
    started = started || l["text"].get<std::string>().find("control socket") != std::string::npos;
  EXPECT_TRUE(started) << all.dump();
  EXPECT_EQ(json("log show -n 3")["lines"].size(), 3u);

  Exec set = ctl("log level steer debug");
  ASSERT_EQ(set.rc, 0) << set.err;
  Json after = json("log");
  EXPECT_EQ(level_of(after, "steer"), "debug");
  EXPECT_EQ(level_of(after, "io"), "info");
  bool logged = false;
  for (const auto& l : after["lines"])
    logged = logged || l["text"].get<std::string>().find("log level of steer set to debug") !=
                           std::string::npos;
  EXPECT_TRUE(logged) << after.dump();

  Exec bad = ctl("log level stear debug");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("no part 'stear' logs (app, control"), std::string::npos) << bad.err;
  EXPECT_EQ(ctl("log level loud").rc, 2);

  ASSERT_EQ(ctl("log level info").rc, 0);  // every part back to the file's level
  const Json reset = json("log");
  for (const auto& l : reset["levels"])
    EXPECT_EQ(l["level"], "info") << l.dump();
}

TEST_F(VecflowctlTest, ReloadAppliesAGoodFileAndRefusesABadOne) {
  rewrite("vct-renamed", "logging: {level: debug}\n");
  Exec good = ctl("reload " + config_);
  ASSERT_EQ(good.rc, 0) << good.err;
  EXPECT_NE(good.out.find("appliance.name"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("vct-renamed"), std::string::npos);
  EXPECT_EQ(json("status")["name"], "vct-renamed");

  std::string bad = dir_ + "/bad.yaml";
  std::ofstream(bad) << "ports:\n  - {name: wan, type: afxpd, interface: wan0}\n";
  Exec refused = ctl("reload " + bad);
  EXPECT_EQ(refused.rc, 1);
  EXPECT_NE(refused.err.find(bad + ":2:"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("did you mean 'afxdp'"), std::string::npos);
  Json s = json("status");
  EXPECT_EQ(s["name"], "vct-renamed");  // the old configuration keeps running
  EXPECT_EQ(s["config"]["source"], config_);
  EXPECT_GE(s["config"]["reloads_failed"].get<int>(), 1);

  Json refused_json = Json::parse(ctl("--json reload " + bad).out);
  EXPECT_EQ(refused_json["error"]["code"], "invalid_config");
  EXPECT_EQ(refused_json["error"]["details"]["errors"][0]["line"], 2);

  // A change the running parts cannot apply is reported, not half-applied.
  rewrite("vct-renamed", "logging: {level: debug}\n");
  std::string text;
  {
    std::ifstream f(config_);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  text.replace(text.find("memory_mb: 128"), 14, "memory_mb: 256");
  std::ofstream(config_) << text;
  Json r = json("reload");
  EXPECT_EQ(r["restart_required"][0]["section"], "dpdk");
  EXPECT_EQ(json("config dpdk")["dpdk"]["memory_mb"], 128);
  // Back to the file the suite started with.
  rewrite("vct-lab");
  ASSERT_EQ(ctl("reload").rc, 0);
  EXPECT_EQ(json("status")["name"], "vct-lab");
}

TEST_F(VecflowctlTest, SighupReloadsTheRunningFile) {
  rewrite("vct-hup");
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  std::string name;
  for (int i = 0; i < 100 && name != "vct-hup"; ++i) {
    std::this_thread::sleep_for(50ms);
    name = json("status")["name"];
  }
  EXPECT_EQ(name, "vct-hup");
  rewrite("vct-lab");
  kill(daemon_->pid(), SIGHUP);
  for (int i = 0; i < 100 && name != "vct-lab"; ++i) {
    std::this_thread::sleep_for(50ms);
    name = json("status")["name"];
  }
  EXPECT_EQ(name, "vct-lab");
}

TEST_F(VecflowctlTest, UnconfirmedReloadRevertsAndConfirmedStays) {
  rewrite("vct-try");
  Exec r = ctl("reload --confirm-within 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("reverts unless confirmed within"), std::string::npos) << r.out;
  Json s = json("status");
  EXPECT_EQ(s["name"], "vct-try");
  EXPECT_TRUE(s["config"]["confirm_pending"].is_object());
  std::string name;
  for (int i = 0; i < 60 && name != "vct-lab"; ++i) {
    std::this_thread::sleep_for(100ms);
    name = json("status")["name"];
  }
  EXPECT_EQ(name, "vct-lab");

  ASSERT_EQ(ctl("reload --confirm-within 1").rc, 0);
  ASSERT_EQ(ctl("confirm").rc, 0);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(json("status")["name"], "vct-try");
  EXPECT_EQ(ctl("confirm").rc, 1);  // nothing pending
  rewrite("vct-lab");
  ASSERT_EQ(ctl("reload").rc, 0);
}

// The text exposition format, checked by Prometheus' own Python parser, and compared with the
// JSON of the same counters.
TEST_F(VecflowctlTest, MetricsScrapeIsValidAndAgreesWithTheJson) {
  // The lab's hosts send a frame now and then (IPv6 neighbour discovery) and the counters are
  // sampled every second: the scrape must lie between the JSON read before and after it.
  Json e0 = json("errors");
  Json acc0 = json("accounting");
  std::string text = http_get(lab_->ns('a'), "/metrics");
  ASSERT_FALSE(text.empty());
  std::string file = dir_ + "/scrape.txt";
  std::ofstream(file) << text;
  Exec parsed =
      run("/usr/bin/python3 -c 'import sys,json\n"
          "from prometheus_client.parser import text_string_to_metric_families as p\n"
          "out={}\n"
          "for f in p(open(sys.argv[1]).read()):\n"
          "  for s in f.samples:\n"
          "    out[s.name+json.dumps(s.labels,sort_keys=True)]=s.value\n"
          "print(json.dumps(out))' " +
          file);
  ASSERT_EQ(parsed.rc, 0) << "not valid exposition format: " << parsed.err;
  // Prometheus' own linter: names, units, help, types (tools/setup.sh installs promtool).
  Exec lint =
      run("command -v promtool >/dev/null || { echo 'promtool not found: run "
          "tools/setup.sh' >&2; exit 127; }; promtool check metrics < " +
          file);
  EXPECT_EQ(lint.rc, 0) << lint.out << lint.err;
  Json samples = Json::parse(parsed.out);
  auto value = [&](const std::string& name, const Json& labels) {
    std::string key = name + labels.dump();
    // json.dumps puts a space after ':' and ','.
    key = std::regex_replace(key, std::regex("\":"), "\": ");
    key = std::regex_replace(key, std::regex(",\""), ", \"");
    EXPECT_TRUE(samples.contains(key)) << key;
    return samples.contains(key) ? samples[key].get<double>() : -1.0;
  };
  Json s = json("status");
  EXPECT_EQ(value("vecflow_config_info",
                  {{"hash", s["config"]["hash"]}, {"name", s["name"]}, {"source", config_}}),
            1);
  Json e = json("errors");
  double drops = 0;
  for (const auto& [k, v] : samples.items())
    if (k.starts_with("vecflow_drops_total{")) drops += v.get<double>();
  EXPECT_GE(drops, e0["total"].get<double>());
  EXPECT_LE(drops, e["total"].get<double>());
  Json acc = json("accounting");
  for (size_t i = 0; i < acc["ports"].size(); ++i) {
    const Json& p = acc["ports"][i];
    double rx = value("vecflow_accounting_rx_packets_total", {{"port", p["port"]}});
    EXPECT_GE(rx, acc0["ports"][i]["rx_packets"].get<double>());
    EXPECT_LE(rx, p["rx_packets"].get<double>());
  }
  EXPECT_EQ(value("vecflow_config_reloads_total", {{"result", "failed"}}),
            s["config"]["reloads_failed"].get<double>());
  // `vecflowctl metrics` serves the same families as the endpoint.
  Json m = json("metrics");
  for (const auto& f : m["families"]) {
    EXPECT_NE(text.find("# TYPE " + f["name"].get<std::string>() + " "), std::string::npos)
        << f["name"];
  }
  EXPECT_TRUE(std::regex_search(
      text, std::regex("vecflow_lcore_busy_cycles_total\\{lcore=\"0\"\\} [0-9]+")));
  EXPECT_NE(http_get(lab_->ns('a'), "/").find("/metrics"), std::string::npos);
}

TEST_F(VecflowctlTest, DpdkTelemetryShowsVecflowCommands) {
  Exec r =
      run("printf '/vecflow/errors\\n/vecflow/status\\n' | /usr/bin/python3 "
          "/usr/bin/dpdk-telemetry.py -f " +
          prefix_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"/vecflow/errors\": {"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"no_route\": 0"), std::string::npos);
  EXPECT_NE(r.out.find("\"name\": \"vct-lab\""), std::string::npos);
  // Every read-only command is offered (a help text DPDK finds too long once kept one out).
  Exec list = run("printf '/\\n' | /usr/bin/python3 /usr/bin/dpdk-telemetry.py -f " + prefix_);
  ASSERT_EQ(list.rc, 0) << list.err;
  const Json commands = json("commands");
  size_t read_commands = 0;
  for (const auto& c : commands["commands"]) {
    if (c["access"] != "read") continue;
    ++read_commands;
    EXPECT_NE(list.out.find("\"/vecflow/" + c["name"].get<std::string>() + "\""), std::string::npos)
        << c["name"] << " is not a telemetry command";
  }
  EXPECT_GT(read_commands, 10u);
}

TEST_F(VecflowctlTest, HundredClientsAtOnceAreAllAnswered) {
  // Each client waits up to a minute: a hundred processes starting at once on two cores (and
  // ten times slower under the sanitizers) take longer than vecflowctl's default 10 s to be
  // answered, which is the machine's wait, not the daemon refusing anyone.
  std::string cmd;
  for (int i = 0; i < 100; ++i) {
    cmd += std::string(VECFLOWCTL_PATH) + " -s " + socket_ +
           " --timeout 60000 --json status >/dev/null || echo " + std::to_string(i) + " & ";
  }
  Exec r = run("(" + cmd + " wait)");
  EXPECT_EQ(r.out, "") << "clients that failed: " << r.out << r.err;
  EXPECT_EQ(ctl("status").rc, 0);
}

TEST_F(VecflowctlTest, MisbehavingClientsDoNotHurtTheDaemon) {
  auto raw = [](const std::string& path, const std::string& bytes, bool half_close) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return std::string("-");
    send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (half_close) shutdown(fd, SHUT_WR);
    std::string out;
    char b[4096];
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 3000) > 0) {
      ssize_t n = recv(fd, b, sizeof(b), 0);
      if (n <= 0) break;
      out.append(b, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  };
  EXPECT_NE(raw(socket_, "{nope\n", true).find("malformed_request"), std::string::npos);
  EXPECT_NE(raw(socket_, "{\"command\":\"sta", true).find("truncated_request"), std::string::npos);
  EXPECT_NE(raw(socket_, std::string(70000, 'x'), false).find("request_too_large"),
            std::string::npos);
  EXPECT_NE(raw(socket_, "", false).find("\"timeout\""), std::string::npos);
  EXPECT_EQ(ctl("status").rc, 0);
}

TEST_F(VecflowctlTest, UsersOutsideTheGroupAreRefusedByTheKernel) {
  if (!accounts_->ok()) GTEST_SKIP() << "cannot create throwaway users (groupadd/useradd)";
  struct stat st {};
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  std::string ctl_cmd = std::string(VECFLOWCTL_PATH) + " -s " + socket_;
  Exec out = run("runuser -u " + accounts_->outside() + " -- " + ctl_cmd + " status");
  EXPECT_EQ(out.rc, 4) << out.err;
  EXPECT_NE(out.err.find("permission denied"), std::string::npos) << out.err;
  Exec in = run("runuser -u " + accounts_->inside() + " -- " + ctl_cmd + " status");
  EXPECT_EQ(in.rc, 0) << in.err;
  // Group members may change state too.
  Exec reload = run("runuser -u " + accounts_->inside() + " -- " + ctl_cmd + " reload");
  EXPECT_EQ(reload.rc, 0) << reload.err;
}

TEST_F(VecflowctlTest, WatchRedraws) {
  Exec r = run("timeout --preserve-status -s INT 2.5 " + std::string(VECFLOWCTL_PATH) + " -s " +
               socket_ + " --watch 1 --json errors");
  EXPECT_EQ(r.rc, 0) << r.err;
  size_t lines = static_cast<size_t>(std::count(r.out.begin(), r.out.end(), '\n'));
  EXPECT_GE(lines, 2u) << r.out;
}

// `trace show` until `packets` traced packets have reached the end of their path (sent,
// dropped or handed to the kernel), for at most five seconds.
Json trace_until_finished(const std::function<Json(const std::string&)>& json, size_t packets) {
  Json t = json("trace show");
  for (int i = 0; i < 50 && t["trace"]["finished"].get<size_t>() < packets; ++i) {
    std::this_thread::sleep_for(100ms);
    t = json("trace show");
  }
  return t;
}

std::vector<std::string> step_names(const Json& packet) {
  std::vector<std::string> out;
  for (const auto& s : packet["steps"])
    out.push_back(s["step"].get<std::string>());
  return out;
}

// A ping's echo request followed from the wan port's rx queue through both stages (the direct
// path: one worker, no scheduler) and the lan port's tx queue; then a datagram with no route,
// seen dropped by the route stage; the hooks removed once the packets left; `clear` forgets.
TEST_F(VecflowctlTest, TraceFollowsAPingThroughEveryStepAndShowsWhereADropHappens) {
  // Resolves the server's address first, so the request is not held for the neighbour; the
  // first pings may meet links still coming up after XDP was attached.
  ASSERT_EQ(lab_->exec('c',
                       "for i in 1 2 3 4 5; do ping -c 1 -W 1 198.51.100.2 >/dev/null && "
                       "exit 0; done; exit 1"),
            0);
  Exec armed = ctl("trace add 1 --port wan --filter 'icmp and dst host 198.51.100.2'");
  ASSERT_EQ(armed.rc, 0) << armed.err;
  EXPECT_NE(armed.out.find("armed"), std::string::npos) << armed.out;
  ASSERT_EQ(lab_->exec('c', "ping -c 1 -W 1 198.51.100.2 >/dev/null"), 0);
  Json t = trace_until_finished(json, 1);
  ASSERT_EQ(t["packets"].size(), 1u) << t.dump(2);
  const Json ping = t["packets"][0];
  EXPECT_EQ(step_names(ping), (std::vector<std::string>{"rx", "route", "neighbour", "tx"}))
      << ping.dump(2);
  auto detail = [&](size_t i) { return ping["steps"][i]["detail"].get<std::string>(); };
  EXPECT_NE(detail(0).find("wan queue 0: IPv4 ICMP 192.0.2.2 > 198.51.100.2 echo request"),
            std::string::npos)
      << detail(0);
  EXPECT_EQ(detail(1), "continue out lan (connected)");
  EXPECT_NE(detail(2).find("transmit out lan"), std::string::npos) << detail(2);
  EXPECT_NE(detail(2).find("dst mac "), std::string::npos) << detail(2);
  EXPECT_EQ(detail(3), "handed to lan queue 0");
  double last = 0;
  for (const auto& s : ping["steps"]) {
    EXPECT_GE(s["time_us"].get<double>(), last);
    last = s["time_us"].get<double>();
  }
  // The packet left: the trace's hooks go (checked every 20 ms).
  for (int i = 0; i < 20 && t["trace"]["state"] != "idle"; ++i) {
    std::this_thread::sleep_for(50ms);
    t = json("trace show");
  }
  EXPECT_EQ(t["trace"]["state"], "idle");
  Exec shown = ctl("trace show");
  EXPECT_NE(shown.out.find("neighbour"), std::string::npos) << shown.out;

  // No route to 203.0.113.0/24: the route stage drops it and answers it (destination
  // unreachable, built in its buffer), the trace says so, and follows the answer out of wan.
  ASSERT_EQ(ctl("trace add 1 --port wan --filter 'udp dst port 7777'").rc, 0);
  lab_->exec('c', "echo hello | nc -u -w 1 203.0.113.9 7777");
  t = trace_until_finished(json, 1);
  ASSERT_EQ(t["packets"].size(), 1u) << t.dump(2);
  const Json dropped = t["packets"][0];
  EXPECT_EQ(step_names(dropped), (std::vector<std::string>{"rx", "route", "tx"}))
      << dropped.dump(2);
  EXPECT_EQ(dropped["steps"][1]["detail"], "drop (no_route), answered with an ICMP error out wan");

  // A filter libpcap cannot compile is refused, and the trace in place stays.
  Exec bad = ctl("trace add 1 --filter 'udp dst port'");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("filter"), std::string::npos) << bad.err;
  EXPECT_EQ(json("trace show")["packets"].size(), 1u);

  Exec cleared = ctl("trace clear");
  ASSERT_EQ(cleared.rc, 0) << cleared.err;
  EXPECT_TRUE(json("trace show")["packets"].empty());
}

// `hardware` of the lab's veth interfaces: the kernel driver, their one queue, MTU, and the
// steering program attached natively.
TEST_F(VecflowctlTest, HardwareShowsTheDriverQueuesAndTheXdpProgram) {
  const Json h = json("hardware");
  ASSERT_EQ(h["ports"].size(), 2u) << h.dump(2);
  for (const auto& p : h["ports"]) {
    EXPECT_EQ(p["driver"], "veth") << p.dump();
    EXPECT_EQ(p["rx_queues"], 1) << p.dump();
    EXPECT_EQ(p["mtu"], 1500) << p.dump();
    EXPECT_EQ(p["xdp_mode"], "native") << p.dump();
    EXPECT_EQ(p["xdp_program"], "vf_steer") << p.dump();
    EXPECT_GT(p["xdp_program_id"].get<uint32_t>(), 0u) << p.dump();
  }
  Exec one = ctl("hardware --port wan");
  EXPECT_EQ(one.rc, 0) << one.err;
  EXPECT_NE(one.out.find("native vf_steer"), std::string::npos) << one.out;
  EXPECT_EQ(ctl("hardware --port dmz").rc, 2);
}

// `vecflowctl config` prints the appliance file's YAML: saved and reloaded, it changes nothing.
TEST_F(VecflowctlTest, ConfigPrintedAsYamlReloadsWithoutAChange) {
  Exec printed = ctl("config");
  ASSERT_EQ(printed.rc, 0) << printed.err;
  EXPECT_NE(printed.out.find("\n  rules:\n    - name: \"arp\"\n"), std::string::npos)
      << printed.out;
  const std::string saved = dir_ + "/saved.yaml";
  std::ofstream(saved) << printed.out;
  Exec check = run(std::string(VECFLOWD_PATH) + " --check " + saved);
  EXPECT_EQ(check.rc, 0) << check.out << check.err;
  const Json r = json("reload " + saved);
  EXPECT_TRUE(r["changes"].empty()) << r.dump(2);
  EXPECT_TRUE(r["restart_required"].empty()) << r.dump(2);
}

// Bash completion asks this vecflowd for its names: ports after --port, route stages after
// `routes --stage`, log parts and levels after `log level`.
TEST_F(VecflowctlTest, CompletionOffersTheNamesOfTheRunningAppliance) {
  auto complete = [](const std::string& words) {
    const std::string script = dir_ + "/complete.sh";
    std::ofstream(script) << "source " << source_path("appliance/completion/vecflowctl") << "\n"
                          << "COMP_WORDS=(" << VECFLOWCTL_PATH << " -s " << socket_ << " " << words
                          << ")\n"
                          << "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
                          << "_vecflowctl\necho \"${COMPREPLY[*]}\"\n";
    return run("bash " + script).out;
  };
  EXPECT_EQ(complete("trace add 1 --port ''"), "wan lan\n");
  EXPECT_EQ(complete("capture start l"), "lan\n");
  EXPECT_EQ(complete("routes --stage ''"), "route\n");
  EXPECT_EQ(complete("config st"), "steering\n");
  EXPECT_NE(complete("log level ''").find("pipeline"), std::string::npos);
  Exec names = ctl("names ports");
  EXPECT_EQ(names.rc, 0) << names.err;
  EXPECT_EQ(names.out, "wan\nlan\n");
}

// Traces armed and cleared again and again while echo requests cross the appliance at ~1 kpps:
// no request or reply is lost, every trace takes at most what it was asked, and afterwards
// every packet that entered is accounted for.
TEST_F(VecflowctlTest, TracesArmedAndClearedUnderLoadLoseNothing) {
  // The server's address resolved first: the first requests of a flood to an unresolved next
  // hop are held (four) or dropped as neigh_unresolved, which is not what this test is about.
  ASSERT_EQ(lab_->exec('c',
                       "for i in 1 2 3 4 5; do ping -c 1 -W 1 198.51.100.2 >/dev/null && "
                       "exit 0; done; exit 1"),
            0);
  Exec pinged;
  std::thread load(
      [&] { pinged.out = lab_->exec_output('c', "ping -q -c 2000 -i 0.001 -W 1 198.51.100.2"); });
  size_t took = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(ctl("trace add 5").rc, 0);
    std::this_thread::sleep_for(30ms);
    const Json t = json("trace show");
    EXPECT_LE(t["trace"]["taken"].get<uint32_t>(), 5u);
    EXPECT_LE(t["packets"].size(), 5u);
    took += t["packets"].size();
    ASSERT_EQ(ctl("trace clear").rc, 0);
  }
  load.join();
  EXPECT_NE(pinged.out.find(" 0% packet loss"), std::string::npos) << pinged.out;
  EXPECT_GT(took, 0u);
  Json acc = json("accounting");
  for (int i = 0; i < 20; ++i) {
    bool settled = true;
    for (const auto& p : acc["ports"])
      settled &= p["in_flight"].get<int64_t>() == 0;
    if (settled) break;
    std::this_thread::sleep_for(50ms);
    acc = json("accounting");
  }
  for (const auto& p : acc["ports"]) {
    EXPECT_EQ(p["in_flight"].get<int64_t>(), 0) << p.dump();
    EXPECT_EQ(p["rx_packets"].get<uint64_t>(),
              p["tx_packets"].get<uint64_t>() + p["kernel_packets"].get<uint64_t>() +
                  p["dropped"].get<uint64_t>() + p["held"].get<uint64_t>())
        << p.dump();
  }
}

// 2 MB hugepages for one test: reserves what is missing and mounts hugetlbfs if nothing is
// mounted; gives back exactly what it added (only if nobody changed the reservation since).
class Hugepages {
 public:
  explicit Hugepages(unsigned pages) {
    before_ = read_number("/proc/sys/vm/nr_hugepages");
    unsigned free = meminfo("HugePages_Free:");
    if (free < pages) {
      added_ = pages - free;
      write_number("/proc/sys/vm/nr_hugepages", before_ + added_);
    }
    mount_ = sh_output("awk '$3 == \"hugetlbfs\" {print $2; exit}' /proc/mounts");
    while (!mount_.empty() && mount_.back() == '\n')
      mount_.pop_back();
    if (mount_.empty()) {
      mount_ = "/dev/hugepages";
      mounted_ = sh("mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages") == 0;
    }
    ok_ = meminfo("HugePages_Free:") >= pages && !mount_.empty();
  }
  ~Hugepages() {
    if (mounted_) sh("umount /dev/hugepages");
    if (added_ && read_number("/proc/sys/vm/nr_hugepages") == before_ + added_)
      write_number("/proc/sys/vm/nr_hugepages", before_);
  }
  bool ok() const { return ok_; }
  const std::string& mount() const { return mount_; }

 private:
  static unsigned read_number(const char* path) {
    std::ifstream f(path);
    unsigned v = 0;
    f >> v;
    return v;
  }
  static void write_number(const char* path, unsigned v) { std::ofstream(path) << v; }
  static unsigned meminfo(const std::string& key) {
    std::string out = sh_output("awk '$1 == \"" + key + "\" {print $2}' /proc/meminfo");
    return out.empty() ? 0 : static_cast<unsigned>(std::stoul(out));
  }
  unsigned before_ = 0;
  unsigned added_ = 0;
  std::string mount_;
  bool mounted_ = false;
  bool ok_ = false;
};

// With dpdk.multiprocess, EAL keeps its memory where DPDK's secondary processes map it, and
// vecflowd's rte_pdump_init answers their capture requests: dpdk-dumpcap lists and captures a
// DPDK port of vecflowd. (The port is a net_null vdev given to EAL directly: it is the DPDK
// port the test can make exist before the ports part opens the file's ports.)
TEST(VecflowdDpdkTools, DumpcapCapturesWhenMultiprocess) {
  VECFLOW_REQUIRE_NETNS();
#ifdef VECFLOW_SANITIZE
  // A DPDK secondary (dpdk-dumpcap, not sanitized) maps the primary's memory at the primary's
  // addresses; under ASan the primary's layout sits where the secondary cannot reserve it
  // ("Cannot preallocate VA space"). The normal build runs this test.
  GTEST_SKIP() << "DPDK multi-process cannot attach to a sanitized primary";
#endif
  Hugepages huge(96);
  if (!huge.ok()) GTEST_SKIP() << "cannot reserve 96 free 2 MB hugepages with hugetlbfs mounted";
  Lab lab(unique_name("vct"));
  ASSERT_TRUE(lab.ok());
  char tmpl[] = "/tmp/vct-mp-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string socket = dir + "/control.sock";
  std::string config = dir + "/a.yaml";
  std::string prefix = lab.name() + "-mp";
  std::string text = config_text("vct-mp", prefix, socket, "");
  text.replace(text.find("hugepages: off"), 14,
               "hugepages: on, multiprocess: true, eal_args: [\"--vdev=net_null0\"]");
  std::ofstream(config) << text;
  {
    Daemon d(lab, VECFLOWD_PATH, config, dir + "/log");
    ASSERT_TRUE(d.wait_ready(socket));
    Exec status = run(std::string(VECFLOWCTL_PATH) + " -s " + socket + " --json status");
    Json s = Json::parse(status.out);
    EXPECT_TRUE(s["hugepages"].get<bool>());
    EXPECT_TRUE(s["dpdk_tools"]["pdump"].get<bool>()) << s["dpdk_tools"].dump();
    Exec list = run("timeout 60 dpdk-dumpcap --file-prefix=" + prefix + " -D");
    EXPECT_EQ(list.rc, 0) << list.err;
    EXPECT_NE(list.out.find("net_null0"), std::string::npos) << list.out << list.err;
    std::string pcap = dir + "/dumpcap.pcapng";
    Exec capture = run("timeout 60 dpdk-dumpcap --file-prefix=" + prefix +
                       " -i net_null0 -a duration:1 -w " + pcap);
    EXPECT_EQ(capture.rc, 0) << capture.out << capture.err;
    EXPECT_NE((capture.out + capture.err).find("Packets captured: 0"), std::string::npos)
        << capture.out << capture.err;
    EXPECT_TRUE(std::filesystem::exists(pcap));
    EXPECT_EQ(d.stop(), 0);
  }
  // EAL leaves its page files behind with shared memory: give the pages back.
  sh("rm -f " + huge.mount() + "/" + prefix + "map_*");
  std::filesystem::remove_all(dir);
}

// Through the scheduler (scheduler.path: scheduled), a ping's trace shows the flow bucket its
// vector was formed in and the scheduler queue it crossed, and `sched` the rx adapter and the
// worker instead of the direct path.
TEST(VecflowdScheduled, TraceShowsTheVectorAndTheSchedulerOnTheScheduledPath) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vct"));
  ASSERT_TRUE(lab.ok());
  char tmpl[] = "/tmp/vct-sched-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string socket = dir + "/control.sock";
  std::string config = dir + "/a.yaml";
  std::ofstream(config) << config_text("vct-sched", lab.name() + "-eal", socket, "",
                                       "scheduler: {path: scheduled}\n");
  Daemon d(lab, VECFLOWD_PATH, config, dir + "/log");
  ASSERT_TRUE(d.wait_ready(socket));
  auto json = [&](const std::string& cmd) {
    Exec r = run(std::string(VECFLOWCTL_PATH) + " -s " + socket + " --json " + cmd);
    return r.rc == 0 ? Json::parse(r.out) : Json{};
  };
  ASSERT_EQ(lab.exec('c',
                     "for i in 1 2 3 4 5; do ping -c 1 -W 1 198.51.100.2 >/dev/null && "
                     "exit 0; done; exit 1"),
            0);
  ASSERT_EQ(run(std::string(VECFLOWCTL_PATH) + " -s " + socket +
                " trace add 1 --port wan --filter 'icmp and dst host 198.51.100.2'")
                .rc,
            0);
  ASSERT_EQ(lab.exec('c', "ping -c 1 -W 1 198.51.100.2 >/dev/null"), 0);
  Json t = trace_until_finished(json, 1);
  ASSERT_EQ(t["packets"].size(), 1u) << t.dump(2);
  const Json ping = t["packets"][0];
  EXPECT_EQ(step_names(ping),
            (std::vector<std::string>{"rx", "vector", "sched", "route", "neighbour", "tx"}))
      << ping.dump(2);
  EXPECT_NE(ping["steps"][1]["detail"].get<std::string>().find("flow bucket"), std::string::npos);
  EXPECT_NE(ping["steps"][2]["detail"].get<std::string>().find("queue 0 (route+neighbour) atomic"),
            std::string::npos);
  const Json sched = json("sched");
  EXPECT_EQ(sched["path"], "scheduled");
  EXPECT_EQ(sched["backend"], "builtin");
  EXPECT_EQ(sched["rx_adapters"].size(), 1u);
  EXPECT_EQ(sched["workers"].size(), 1u);
  EXPECT_TRUE(sched["direct"].empty());
  EXPECT_EQ(d.stop(), 0);
  std::filesystem::remove_all(dir);
}

TEST(VecflowdStop, StopsCleanlyAndRemovesItsSocket) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vct"));
  ASSERT_TRUE(lab.ok());
  char tmpl[] = "/tmp/vct-stop-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string socket = dir + "/control.sock";
  std::string config = dir + "/a.yaml";
  std::ofstream(config) << config_text("vct-stop", lab.name() + "-eal", socket, "");
  Daemon d(lab, VECFLOWD_PATH, config, dir + "/log");
  ASSERT_TRUE(d.wait_ready(socket));
  EXPECT_EQ(d.stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(socket));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vecflow::test
