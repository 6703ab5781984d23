// The forwarding tests' fixture: vecflowd on the demo topology and configuration (AF_XDP on
// wan0, DPDK's net_af_xdp on lan0, steering keeping ARP and SSH in the kernel), with this
// test's socket and EAL prefix, and the vecflowctl calls and accounting checks the tests share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/daemon.h"
#include "support/lab.h"

namespace vecflow::test {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr unsigned kFloodPort = 4791;

// The embedded demo configuration, with this test's socket and EAL file prefix.
inline std::string test_config(const std::string& socket, const std::string& prefix) {
  Exec demo = run(std::string(VECFLOWD_PATH) + " --print-demo-config");
  std::string text = demo.out;
  text =
      std::regex_replace(text, std::regex("file_prefix: vecflow-demo"), "file_prefix: " + prefix);
  text =
      std::regex_replace(text, std::regex("socket: /run/vecflow/demo.sock"), "socket: " + socket);
  text = std::regex_replace(text, std::regex("\n  metrics: [^\n]*"), "");
  // A rule of its own for the flood, so that its hits count exactly the test's frames (the
  // hosts' kernels send a few frames of their own: IPv6 neighbour discovery, MLD).
  text = std::regex_replace(text, std::regex("\n  rules:\n"),
                            "\n  rules:\n    - {name: flood, match: {proto: udp, dst_port: " +
                                std::to_string(kFloodPort) + "}, action: userspace}\n");
  return text;
}

// The demo's pipeline with its acl stage replaced by `stages` (list items indented as the
// pipeline's), the route stage still fused after them.
inline std::string replace_demo_acl(const std::string& text, const std::string& stages) {
  return std::regex_replace(text,
                            std::regex("  - stage: acl\n(.|\n)*?  - stage: route\n    fuse: true"),
                            stages + "\n  - stage: route\n    fuse: true");
}

// The demo configuration with the lab's IPv6 networks routed too (tools/lab.sh), neighbour
// discovery answered by the kernel at XDP (as configs/edge.yaml does): through the exception
// path's TAP it would reach the kernel on another interface than the one the address is on.
inline std::string with_ipv6(std::string text) {
  text = std::regex_replace(
      text, std::regex("(    - \\{name: arp, match: \\{l3: arp\\}, action: pass\\})"),
      "$1\n    - {name: icmp6-nd, match: {proto: icmpv6}, action: pass}");
  return std::regex_replace(text,
                            std::regex("(      - \\{prefix: 192\\.0\\.2\\.0/24, port: wan\\})"),
                            "$1\n      - {prefix: \"2001:db8:2::/64\", port: lan}"
                            "\n      - {prefix: \"2001:db8:1::/64\", port: wan}");
}

// The demo as a stateful firewall: route and neighbour, then conntrack (invalid packets
// dropped) and an ACL that lets replies back and new connections in from wan only, all fused.
inline std::string with_stateful_firewall(std::string text) {
  text = std::regex_replace(text,
                            std::regex("  - stage: acl\n(.|\n)*?  - stage: route\n    fuse: true"),
                            "  - stage: route\n    sched: atomic");
  return std::regex_replace(text, std::regex("\n\ncontrol:"), R"(
  - stage: conntrack
    fuse: true
    invalid: drop
  - stage: acl
    fuse: true
    default: deny
    rules:
      - {name: replies, action: permit, ct: [established, related]}
      - {name: from-wan, action: permit, ct: new, in_port: wan}

control:)");
}

class Forwarding : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    name_ = unique_name("vfw");
    dir_ = "/tmp/" + name_;
    std::filesystem::create_directories(dir_);
    socket_ = dir_ + "/control.sock";
    lab_ = std::make_unique<Lab>(name_, lab_queues());
    ASSERT_TRUE(lab_->ok());
    prepare_lab();
    std::ofstream(dir_ + "/appliance.yaml") << edit_config(test_config(socket_, name_));
    daemon_ = std::make_unique<Daemon>(*lab_, VECFLOWD_PATH, dir_ + "/appliance.yaml",
                                       dir_ + "/vecflowd.log");
    ASSERT_TRUE(daemon_->wait_ready(socket_)) << log();
    if (resolve_first()) {
      // The kernel resolves both hosts first, so no first packet waits for a neighbour.
      ASSERT_EQ(lab_->exec('a',
                           "ping -c 1 -W 2 192.0.2.2 >/dev/null && "
                           "ping -c 1 -W 2 198.51.100.2 >/dev/null"),
                0);
      ASSERT_TRUE(wait_neighbours()) << ctl("neighbours").out;
    }
    // Attaching XDP to a veth bounces its carrier, and the kernel reports the link up again
    // up to ~0.3 s later; until vecflowd sees it up, what it would send there is counted as
    // link_down. The tests start on links that are up.
    ASSERT_TRUE(wait_links_up()) << ctl("status").out;
  }

  void TearDown() override {
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0) << log();
      // Stopped: every packet received was carried to its end before the counters froze.
      EXPECT_NE(log().find("stopped cleanly"), std::string::npos) << log();
      // And took DPDK's runtime directory with it (each run left ~19 MB behind before).
      EXPECT_FALSE(std::filesystem::exists("/var/run/dpdk/" + name_));
    }
    daemon_.reset();
    lab_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A test's changes to the configuration vecflowd starts with.
  virtual std::string edit_config(std::string text) { return text; }
  // Queues of the lab's veth pairs.
  virtual int lab_queues() const { return 1; }
  // What a test changes in the lab before vecflowd starts (channel counts).
  virtual void prepare_lab() {}
  // Whether the appliance's kernel resolves both hosts before the test starts.
  virtual bool resolve_first() const { return true; }

  std::string log() const {
    std::ifstream f(dir_ + "/vecflowd.log");
    return {std::istreambuf_iterator<char>(f), {}};
  }

  Exec ctl(const std::string& args) {
    return run("ip netns exec " + lab_->ns('a') + " " VECFLOWCTL_PATH " --socket " + socket_ + " " +
               args);
  }
  Json json(const std::string& args) {
    Exec r = ctl("--json " + args);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? Json::parse(r.out) : Json();
  }

  bool wait_neighbours() {
    for (int i = 0; i < 50; ++i) {
      Json n = json("neighbours");
      int resolved = 0;
      for (const auto& e : n["entries"])
        if ((e["ip"] == "192.0.2.2" || e["ip"] == "198.51.100.2") && e["state"] == "resolved")
          ++resolved;
      if (resolved == 2) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  bool wait_links_up() {
    for (int i = 0; i < 50; ++i) {
      bool up = true;
      const Json status = json("status");
      for (const auto& p : status["ports"])
        up = up && p["state"] == "up";
      if (up) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  // The accounting once it is settled: nothing in flight and two samples in a row equal (the
  // control plane samples the counters once a second).
  Json settled_accounting() {
    Json last;
    for (int i = 0; i < 40; ++i) {
      Json a = json("accounting")["ports"];
      bool idle = true;
      for (const auto& p : a)
        idle = idle && p["in_flight"] == 0;
      if (idle && a == last) return a;
      last = a;
      std::this_thread::sleep_for(300ms);
    }
    ADD_FAILURE() << "accounting did not settle";
    return last;
  }

  // Settled accounting, steering and errors that describe the same packets. The hosts' kernels
  // send frames of their own at any time (IPv6 neighbour discovery, MLD); one that XDP counted
  // in one read but vecflowd had not yet received in another would break an identity that
  // compares the two. Reads bracketed by two equal XDP counts saw no such frame in between.
  struct Counters {
    Json accounting, steering, errors;
  };
  Counters quiet_counters() {
    // Up to ~30 tries: a fresh lab's hosts send router solicitations and MLD reports for
    // their first ~10 s, which a slow (sanitizer) build's first tests still meet.
    for (int i = 0; i < 30; ++i) {
      Json before = json("steering");
      Counters c{settled_accounting(), json("steering"), json("errors")};
      if (before["ports"] == c.steering["ports"] && json("steering")["ports"] == before["ports"])
        return c;
    }
    ADD_FAILURE() << "the XDP counters did not stay still for a second, 30 times";
    return {};
  }

  static Json port(const Json& rows, const std::string& name) {
    for (const auto& p : rows)
      if (p["port"] == name) return p;
    return Json();
  }

  // rx = tx + kernel + dropped on every port (nothing held: `held` is 0 once settled).
  void expect_exact(const Json& rows) {
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& p : rows) {
      EXPECT_EQ(p["rx_packets"].get<uint64_t>(), p["tx_packets"].get<uint64_t>() +
                                                     p["kernel_packets"].get<uint64_t>() +
                                                     p["dropped"].get<uint64_t>())
          << p.dump();
    }
  }

  std::string name_, dir_, socket_;
  std::unique_ptr<Lab> lab_;
  std::unique_ptr<Daemon> daemon_;
};

}  // namespace vecflow::test
