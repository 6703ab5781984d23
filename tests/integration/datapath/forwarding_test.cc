// vecflowd forwards between the lab's namespaces, on the demo's topology and configuration:
// AF_XDP on wan0, DPDK's net_af_xdp on lan0, steering keeping ARP and SSH in the kernel, the
// rest routed in user space through vectors. Every test ends with the accounting identity per
// port (rx = tx + kernel + dropped, nothing in flight) and checks what the hosts saw against
// what vecflowd counted.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/daemon.h"
#include "support/lab.h"

namespace vecflow::test {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr unsigned kFloodPort = 4791;

// The embedded demo configuration, with this test's socket and EAL file prefix.
std::string test_config(const std::string& socket, const std::string& prefix) {
  Exec demo = run(std::string(VECFLOWD_PATH) + " --print-demo-config");
  std::string text = demo.out;
  text = std::regex_replace(text, std::regex("file_prefix: vecflow-demo"),
                            "file_prefix: " + prefix);
  text = std::regex_replace(text, std::regex("socket: /run/vecflow/demo.sock"), "socket: " + socket);
  text = std::regex_replace(text, std::regex("\n  metrics: [^\n]*"), "");
  // A rule of its own for the flood, so that its hits count exactly the test's frames (the
  // hosts' kernels send a few frames of their own: IPv6 neighbour discovery, MLD).
  text = std::regex_replace(
      text, std::regex("\n  rules:\n"),
      "\n  rules:\n    - {name: flood, match: {proto: udp, dst_port: " + std::to_string(kFloodPort) +
          "}, action: userspace}\n");
  return text;
}

class Forwarding : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    name_ = unique_name("vfw");
    dir_ = "/tmp/" + name_;
    std::filesystem::create_directories(dir_);
    socket_ = dir_ + "/control.sock";
    lab_ = std::make_unique<Lab>(name_);
    ASSERT_TRUE(lab_->ok());
    std::ofstream(dir_ + "/appliance.yaml") << test_config(socket_, name_);
    daemon_ = std::make_unique<Daemon>(*lab_, VECFLOWD_PATH, dir_ + "/appliance.yaml",
                                       dir_ + "/vecflowd.log");
    ASSERT_TRUE(daemon_->wait_ready(socket_)) << log();
    // The kernel resolves both hosts first, so no first packet waits for a neighbour.
    ASSERT_EQ(lab_->exec('a', "ping -c 1 -W 2 192.0.2.2 >/dev/null && "
                              "ping -c 1 -W 2 198.51.100.2 >/dev/null"),
              0);
    ASSERT_TRUE(wait_neighbours()) << ctl("neighbours").out;
  }

  void TearDown() override {
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0) << log();
      // Stopped: every packet received was carried to its end before the counters froze.
      EXPECT_NE(log().find("stopped cleanly"), std::string::npos) << log();
    }
    daemon_.reset();
    lab_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string log() const {
    std::ifstream f(dir_ + "/vecflowd.log");
    return {std::istreambuf_iterator<char>(f), {}};
  }

  Exec ctl(const std::string& args) {
    return run("ip netns exec " + lab_->ns('a') + " " VECFLOWCTL_PATH " --socket " + socket_ +
               " " + args);
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

  static Json port(const Json& rows, const std::string& name) {
    for (const auto& p : rows)
      if (p["port"] == name) return p;
    return Json();
  }

  // rx = tx + kernel + dropped on every port.
  void expect_exact(const Json& rows) {
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& p : rows) {
      EXPECT_EQ(p["rx_packets"].get<uint64_t>(),
                p["tx_packets"].get<uint64_t>() + p["kernel_packets"].get<uint64_t>() +
                    p["dropped"].get<uint64_t>())
          << p.dump();
    }
  }

  std::string name_, dir_, socket_;
  std::unique_ptr<Lab> lab_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(Forwarding, PingCrossesInBothDirections) {
  EXPECT_EQ(lab_->exec('c', "ping -c 5 -i 0.2 -W 1 198.51.100.2 >/dev/null"), 0);
  EXPECT_EQ(lab_->exec('s', "ping -c 5 -i 0.2 -W 1 192.0.2.2 >/dev/null"), 0);
  Json a = settled_accounting();
  expect_exact(a);
  // Each echo entered on one port and left on the other: 10 in on each side, all forwarded.
  EXPECT_GE(port(a, "wan")["tx_packets"].get<uint64_t>(), 10u);
  EXPECT_GE(port(a, "lan")["tx_packets"].get<uint64_t>(), 10u);
}

TEST_F(Forwarding, TcpTransferArrivesWhole) {
  const std::string in = dir_ + "/in", out = dir_ + "/out";
  ASSERT_EQ(run("head -c 2097152 /dev/urandom > " + in).rc, 0);
  std::thread server([&] {
    lab_->exec('s', "timeout 20 nc -d -l -p 5001 > " + out);
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(lab_->exec('c', "timeout 20 nc -N -w 5 198.51.100.2 5001 < " + in), 0);
  server.join();
  EXPECT_EQ(run("cmp " + in + " " + out).rc, 0) << "the server got other bytes";
  Json a = settled_accounting();
  expect_exact(a);
  // 2 MiB in 1448-byte segments: at least 1449 packets each way through user space.
  EXPECT_GT(port(a, "wan")["tx_packets"].get<uint64_t>(), 1448u);
}

TEST_F(Forwarding, SshToTheApplianceStaysInTheKernel) {
  Json before = json("steering");
  std::thread listener([&] { lab_->exec('a', "timeout 5 nc -d -l -p 22 > /dev/null"); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(lab_->exec('c', "echo hello | timeout 5 nc -N -w 2 192.0.2.1 22"), 0);
  listener.join();
  Json after = json("steering");
  auto hits = [](const Json& j) {
    for (const auto& r : j["rules"])
      if (r["rule"] == "ssh") return r["packets"].get<uint64_t>();
    return uint64_t{0};
  };
  // The handshake, the data and the close: the XDP rule passed each to the kernel.
  EXPECT_GE(hits(after) - hits(before), 3u);
  expect_exact(settled_accounting());
}

// A UDP flood from trafgen: what the receiver counted is what vecflowd transmitted for wan,
// and what XDP lifted is what vecflowd received or counted as a device drop.
TEST_F(Forwarding, UdpFloodIsAccountedPacketForPacket) {
  const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
  Json acc0 = settled_accounting();
  Json steer0 = json("steering");
  Json errors0 = json("errors");
  std::string recv_json = dir_ + "/recv.json";
  std::thread receiver([&] {
    lab_->exec('s', std::string(TRAFGEN_PATH) + " recv --dev eth0 --idle-exit 1500 --duration 30 "
                    "--json > " + recv_json);
  });
  std::this_thread::sleep_for(300ms);
  constexpr uint64_t kPackets = 50000;
  ASSERT_EQ(lab_->exec('c', std::string(TRAFGEN_PATH) +
                                " send --dev eth0 --dst 198.51.100.2 --dst-mac " +
                                wan_mac.substr(0, 17) + " --flows 256 --size 60 --rate 50000 "
                                "--dst-port " + std::to_string(kFloodPort) + " --count " + std::to_string(kPackets) +
                                " > /dev/null"),
            0);
  receiver.join();
  Json rx = Json::parse(std::ifstream(recv_json));
  Json acc = settled_accounting();
  Json steer = json("steering");
  Json errors = json("errors");
  expect_exact(acc);

  auto d = [](const Json& a, const Json& b, const char* k) {
    return b[k].get<uint64_t>() - a[k].get<uint64_t>();
  };
  const Json& wan0 = port(acc0, "wan");
  const Json& wan = port(acc, "wan");
  auto xdp = [](const Json& s, const char* key) {
    for (const auto& p : s["ports"])
      if (p["port"] == "wan") return p[key].get<uint64_t>();
    return uint64_t{0};
  };
  auto flood_hits = [](const Json& s) {
    for (const auto& r : s["rules"])
      if (r["rule"] == "flood") return r["packets"].get<uint64_t>();
    return uint64_t{0};
  };
  // Every frame sent met the XDP program and its rule, which lifted it to user space.
  EXPECT_EQ(flood_hits(steer) - flood_hits(steer0), kPackets);
  // The receiver got what vecflowd transmitted (its socket dropped nothing).
  EXPECT_EQ(rx["socket_drops"].get<uint64_t>(), 0u);
  EXPECT_EQ(rx["received"].get<uint64_t>(), d(wan0, wan, "tx_packets"));
  EXPECT_EQ(rx["reordered"].get<uint64_t>(), 0u);
  // Lifted = received by vecflowd + dropped on the way to it (AF_XDP rings full, counted by
  // the kernel as device drops): nothing vanished.
  auto device_drops = [](const Json& errors) {
    uint64_t n = 0;
    for (const auto& w : errors["by_port"])
      if (w["port"] == "wan" && w["layer"] == "device") n += w["count"].get<uint64_t>();
    return n;
  };
  EXPECT_EQ(d(wan0, wan, "rx_packets") + device_drops(errors) - device_drops(errors0),
            xdp(steer, "userspace") - xdp(steer0, "userspace"))
      << errors.dump();
}

}  // namespace
}  // namespace vecflow::test
