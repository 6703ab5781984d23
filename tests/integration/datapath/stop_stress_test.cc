// vecflowd stopped at random moments under full load, many times over, across the
// configurations whose teardown differs: each run must end with exit status 0, "stopped
// cleanly", every port's final accounting at unaccounted=0, and nothing new in the kernel log.
// The eventdev backend once crashed on every stop (its drain left events inside event_dsw
// whose vectors the teardown freed after their pool); one run per configuration would not have
// shown a race of that kind, so this test makes many.
//
//   VECFLOW_STOP_RUNS  runs (default 24, 12 in the sanitizer build; the acceptance run
//                      is 200 or more)
//   VECFLOW_STOP_SEED  first seed (default 1): run i uses seed + i, and a failure names it
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "support/daemon.h"
#include "support/lab.h"

namespace vecflow::test {
namespace {

using namespace std::chrono_literals;

constexpr unsigned kFloodPort = 4791;
// The DPDK runs replay these flow counts from memory (a million 64 B frames would need a
// pool of 2 GB without hugepages); the AF_XDP runs also use a million flows from trafgen.
constexpr unsigned kPcapFlows[] = {1, 1024, 65536};

enum class PortKind { Dpdk, AfXdp };
enum class Stop { Sigterm, Sigint, SighupThenSigterm, ReloadThenSigterm };

struct StopRun {
  unsigned seed = 0;
  PortKind port = PortKind::Dpdk;
  bool eventdev = false;
  bool direct = true;  // scheduler.path auto (one worker: the direct path) or scheduled
  unsigned vector = 64;
  unsigned timeout_us = 50;
  unsigned flows = 1;
  Stop stop = Stop::Sigterm;
  bool during_start = false;  // the signal arrives before the control socket answers
  unsigned delay_ms = 0;      // after the socket answers (or after the start, when during_start)

  std::string describe() const {
    static const char* stops[] = {"SIGTERM", "SIGINT", "SIGHUP then SIGTERM",
                                  "reload then SIGTERM"};
    return fmt::format("seed {}: {} port, {}, vectors of {} / {} us, {} flows, {} {} ms after {}",
                       seed, port == PortKind::Dpdk ? "DPDK (net_pcap)" : "AF_XDP",
                       direct ? "direct path" : (eventdev ? "event_dsw" : "builtin"), vector,
                       timeout_us, flows, stops[int(stop)], delay_ms,
                       during_start ? "the start" : "ready");
  }
};

StopRun draw(unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](auto const& choices) { return choices[rng() % std::size(choices)]; };
  StopRun r;
  r.seed = seed;
  r.port = rng() % 2 ? PortKind::AfXdp : PortKind::Dpdk;
  r.eventdev = rng() % 2;
  r.vector = pick(std::array{1u, 64u, 256u});
  r.timeout_us = pick(std::array{10u, 100u, 1000u, 10000u});
  r.flows =
      r.port == PortKind::Dpdk ? pick(kPcapFlows) : pick(std::array{1u, 1024u, 65536u, 1000000u});
  r.stop = static_cast<Stop>(rng() % 4);
  r.during_start = rng() % 8 == 0;
  r.delay_ms = r.during_start ? rng() % 400 : rng() % 1000;
  // Drawn last, so that the other dimensions of a seed stay what they were before it existed.
  r.direct = rng() % 3 == 0;
  return r;
}

unsigned env_or(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  return v ? unsigned(std::stoul(v)) : fallback;
}

// Lines of the kernel log that say a process crashed.
unsigned kernel_crash_lines() {
  return unsigned(std::stoul(sh_output(
      "dmesg 2>/dev/null | grep -cE 'segfault at|general protection|traps:|Oops' || true")));
}

class StopStress : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!can_use_netns()) return;
    name_ = unique_name("vst");
    dir_ = "/tmp/" + name_;
    std::filesystem::create_directories(dir_);
    lab_ = new Lab(name_);
    for (unsigned flows : kPcapFlows) {
      sh(fmt::format("{} pcap --out {} --flows {} --size 60 --dst 198.51.100.2 >/dev/null",
                     TRAFGEN_PATH, pcap(flows), flows));
    }
  }
  static void TearDownTestSuite() {
    delete lab_;
    lab_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    ASSERT_TRUE(lab_->ok());
  }

  static std::string pcap(unsigned flows) { return fmt::format("{}/f{}.pcap", dir_, flows); }

  static std::string config(const StopRun& r, const std::string& socket) {
    std::string ports, steering, route_port, neighbour;
    if (r.port == PortKind::Dpdk) {
      ports = fmt::format(
          "  - {{name: p0, type: dpdk, devargs: \"net_pcap0,rx_pcap={},infinite_rx=1\"}}\n",
          pcap(r.flows));
      route_port = "p0";
      neighbour =
          "  - {stage: neighbour, fuse: true, from_kernel: false, static: [{ip: 198.51.100.2, "
          "mac: \"02:00:00:00:00:02\", port: p0}]}\n";
    } else {
      ports =
          "  - {name: wan, type: afxdp, interface: wan0}\n"
          "  - {name: lan, type: afxdp, interface: lan0}\n";
      steering = fmt::format(
          "steering:\n  rules:\n    - {{name: flood, match: {{proto: udp, dst_port: {}}}, "
          "action: userspace}}\n",
          kFloodPort);
      route_port = "lan";
      neighbour = "  - {stage: neighbour, fuse: true, from_kernel: true}\n";
    }
    // net_pcap copies every frame of the file into the pool at start: room for them and
    // for the traffic.
    const unsigned mbufs = r.port == PortKind::Dpdk ? r.flows + 32768 : 16384;
    return fmt::format(
        "appliance: {{name: stop-stress}}\n"
        "cpu: {{control: 0, workers: [1]}}\n"
        "dpdk: {{memory_mb: {}, hugepages: off, file_prefix: {}-eal, mbufs: {}}}\n"
        "ports:\n{}{}"
        "scheduler:\n  backend: {}\n  path: {}\n  vector: {{size: {}, timeout_us: {}}}\n"
        "pipeline:\n  - stage: route\n    routes:\n"
        "      - {{prefix: 198.51.100.0/24, port: {}}}\n{}"
        "control: {{socket: {}}}\n",
        mbufs / 256 + 192, name_, mbufs, ports, steering,
        r.eventdev ? "eventdev\n  device: event_dsw0" : "builtin", r.direct ? "auto" : "scheduled",
        r.vector, r.timeout_us, route_port, neighbour, socket);
  }

  // One run; failures are reported with the run's description.
  void run_once(const StopRun& r) {
    SCOPED_TRACE(r.describe());
    const std::string run_dir = fmt::format("{}/run{}", dir_, r.seed);
    std::filesystem::create_directories(run_dir);
    const std::string socket = run_dir + "/control.sock", file = run_dir + "/appliance.yaml";
    const std::string log_file = run_dir + "/vecflowd.log";
    std::ofstream(file) << config(r, socket);

    // The AF_XDP runs' load: trafgen at full rate from the client side, started first so that
    // frames arrive during the start as well.
    std::thread sender;
    if (r.port == PortKind::AfXdp) {
      const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
      sender = std::thread([&r, wan_mac, run_dir] {
        lab_->exec('c',
                   fmt::format("echo $$ > {}/sender.pid; exec timeout 20 {} send --dev eth0 "
                               "--dst 198.51.100.2 --dst-mac {} --flows {} --size 60 "
                               "--dst-port {} --duration 15 >/dev/null 2>&1",
                               run_dir, TRAFGEN_PATH, wan_mac.substr(0, 17), r.flows, kFloodPort));
      });
    }
    const unsigned crashes_before = kernel_crash_lines();

    Daemon daemon(*lab_, VECFLOWD_PATH, file, log_file);
    bool ready = false;
    if (r.during_start) {
      std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
    } else {
      ready = daemon.wait_ready(socket);
      std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
    }
    std::thread reloader;
    int sig = SIGTERM;
    switch (r.stop) {
      case Stop::Sigterm:
        break;
      case Stop::Sigint:
        sig = SIGINT;
        break;
      case Stop::SighupThenSigterm:
        daemon.signal(SIGHUP);
        std::this_thread::sleep_for(2ms);
        break;
      case Stop::ReloadThenSigterm:
        std::ofstream(file, std::ios::app) << "# changed\n";
        reloader = std::thread([socket] {
          run(fmt::format("ip netns exec {} {} --socket {} reload", lab_->ns('a'), VECFLOWCTL_PATH,
                          socket));
        });
        std::this_thread::sleep_for(5ms);
        break;
    }
    const int status = daemon.stop(sig);
    if (reloader.joinable()) reloader.join();
    if (sender.joinable()) {
      // Only this run's sender (a pkill by name would reach other tests' generators).
      for (int i = 0; i < 100 && !std::filesystem::exists(run_dir + "/sender.pid"); ++i)
        std::this_thread::sleep_for(10ms);
      sh(fmt::format("kill $(cat {}/sender.pid) 2>/dev/null", run_dir));
      sender.join();
    }

    std::ifstream f(log_file);
    const std::string log{std::istreambuf_iterator<char>(f), {}};
    // A signal that arrives before vecflowd's main() installed its handlers (while `ip netns
    // exec` or the dynamic loader runs) ends the process by its default action, before
    // anything was attached; from main() on every stop exits 0.
    // The first signal a run sends is SIGHUP in a reload-then-stop run.
    const int first = r.stop == Stop::SighupThenSigterm ? SIGHUP : sig;
    const bool before_main =
        r.during_start && status == -1 &&
        (daemon.killed_by_signal() == sig || daemon.killed_by_signal() == first) && log.empty();
    if (!before_main) {
      EXPECT_EQ(status, 0) << "killed by signal " << daemon.killed_by_signal() << "\n" << log;
    }
    EXPECT_EQ(kernel_crash_lines(), crashes_before) << sh_output("dmesg | tail -5") << "\n" << log;
    if (ready) {
      // Every port's final accounting, all exact.
      EXPECT_NE(log.find("stopped cleanly"), std::string::npos) << log;
      std::regex line("final accounting: port (\\w+): .* unaccounted=(-?\\d+)");
      std::set<std::string> ports;
      for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
        ports.insert((*it)[1]);
        EXPECT_EQ((*it)[2], "0") << it->str();
      }
      EXPECT_EQ(ports.size(), r.port == PortKind::Dpdk ? 1u : 2u) << log;
    }
    // Nothing left behind for the next run: DPDK's runtime directory, the control socket.
    EXPECT_FALSE(std::filesystem::exists("/var/run/dpdk/" + name_ + "-eal"));
    EXPECT_FALSE(std::filesystem::exists(socket));
    if (!HasFailure()) std::filesystem::remove_all(run_dir);
  }

  static inline std::string name_, dir_;
  static inline Lab* lab_ = nullptr;
};

// The sanitizer build, several times slower, stops a third as many times by default: the same
// teardown paths under ASan and UBSan, in the time CI has.
#ifdef VECFLOW_SANITIZE
constexpr unsigned kDefaultRuns = 8;
#else
constexpr unsigned kDefaultRuns = 24;
#endif

TEST_F(StopStress, EveryStopUnderLoadIsCleanAndAccountedAcrossConfigurations) {
  const unsigned runs = env_or("VECFLOW_STOP_RUNS", kDefaultRuns);
  const unsigned seed = env_or("VECFLOW_STOP_SEED", 1);
  std::set<std::string> covered;
  for (unsigned i = 0; i < runs && !HasFailure(); ++i) {
    const StopRun r = draw(seed + i);
    covered.insert(r.direct ? "direct" : r.eventdev ? "event_dsw" : "builtin");
    covered.insert(r.port == PortKind::Dpdk ? "dpdk" : "afxdp");
    run_once(r);
  }
  // The default number of runs is enough to meet both backends, the direct path and both port
  // kinds.
  if (runs >= 24) {
    EXPECT_EQ(covered, (std::set<std::string>{"builtin", "event_dsw", "direct", "dpdk", "afxdp"}));
  }
}

}  // namespace
}  // namespace vecflow::test
