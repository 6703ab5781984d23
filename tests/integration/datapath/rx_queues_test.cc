// Every rx queue of an afxdp port's interface is read, or the file says what happens to the
// others (issue 16, item 3): on veths with several rx queues, the default reads them all and
// forwards the flows the kernel hashes to each; a file that reads fewer is refused with the
// counts; `other_queues: drop` drops and counts the frames of the other queues; a channel
// change at run time (ethtool -L) shows in `status` and the log.
#include <chrono>
#include <map>
#include <regex>
#include <thread>

#include <gmock/gmock.h>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

Json row_of(const Json& rows, const std::string& key, const Json& value) {
  for (const auto& r : rows)
    if (r[key] == value) return r;
  return Json();
}

// What the tests share: a UDP flood through the lab, and wan's rows of the counters.
class RxQueuesBase : public Forwarding {
 protected:
  // `count` UDP datagrams from the client's kernel to the server's flood port, each from a
  // socket of its own: the kernel picks a tx queue per socket (its flow hash), so they spread
  // over the rx queues of wan0. (trafgen's AF_PACKET frames bypass the qdisc and take the tx
  // queue of the CPU that sends them: one queue.)
  void send_udp(int count) {
    ASSERT_EQ(lab_->exec('c', "bash -c \"for i in \\$(seq " + std::to_string(count) +
                                  "); do echo x >/dev/udp/198.51.100.2/" +
                                  std::to_string(kFloodPort) + "; done\""),
              0);
    std::this_thread::sleep_for(500ms);
  }
  // UDP datagrams the server's kernel received for a port nobody listens on: the flood.
  uint64_t server_no_ports() {
    const std::string snmp = lab_->exec_output('s', "cat /proc/net/snmp");
    std::smatch m;
    static const std::regex re("\nUdp: \\d+ (\\d+)");
    return std::regex_search(snmp, m, re) ? std::stoull(m[1]) : 0;
  }

  uint64_t wan_steering(const char* key) {
    return row_of(json("steering")["ports"], "port", "wan")[key].get<uint64_t>();
  }
  uint64_t flood_hits() {
    return row_of(json("steering")["rules"], "rule", "flood")["packets"].get<uint64_t>();
  }
  Json wan_rx_queues() { return row_of(json("status")["rx_queues"], "port", "wan"); }
};

// The demo topology on veths with 2 rx queues; each test starts vecflowd on its own file.
class RxQueues : public RxQueuesBase {
 protected:
  int lab_queues() const override { return 2; }
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    name_ = unique_name("vrq");
    dir_ = "/tmp/" + name_;
    std::filesystem::create_directories(dir_);
    socket_ = dir_ + "/control.sock";
    lab_ = std::make_unique<Lab>(name_, lab_queues());
    ASSERT_TRUE(lab_->ok());
  }

  // Writes the demo file with lan reading every queue of lan0 and wan's `queues: 1` replaced
  // by `wan_queues` (YAML lines under the port), then starts vecflowd on it.
  void start(const std::string& wan_queues) {
    std::string text = test_config(socket_, name_);
    text = std::regex_replace(text, std::regex("\n    queues: 1\n"), "\n" + wan_queues);
    text = std::regex_replace(text,
                              std::regex("\n    queues:\n      - \\{queues: 0, owner: dpdk\\}\n"),
                              "\n    queues: all\n");
    std::ofstream(dir_ + "/appliance.yaml") << text;
    daemon_ = std::make_unique<Daemon>(*lab_, VECFLOWD_PATH, dir_ + "/appliance.yaml",
                                       dir_ + "/vecflowd.log");
  }

  // vecflowd has learnt the server's address from the kernel.
  bool wait_server_neighbour() {
    for (int i = 0; i < 150; ++i) {
      const Json n = json("neighbours");
      for (const auto& e : n["entries"])
        if (e["ip"] == "198.51.100.2" && e["state"] == "resolved") return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
};

// The case of the issue: `queues: 1` on a veth with 2 rx queues. vecflowd refuses to start
// and says why, with the counts, at the key.
TEST_F(RxQueues, ReadingFewerQueuesThanTheInterfaceHasIsRefusedWithTheCounts) {
  start("    queues: 1\n");
  for (int i = 0; i < 300 && daemon_->alive(); ++i)
    std::this_thread::sleep_for(100ms);
  ASSERT_FALSE(daemon_->alive()) << log();
  EXPECT_NE(daemon_->stop(), 0);
  daemon_.reset();
  EXPECT_THAT(log(), testing::HasSubstr(
                         "appliance.yaml:27:13: ports[0].queues: interface wan0 has 2 rx queues, "
                         "the file reads 1 (queue 0): flows the interface hashes to queue 1 "
                         "would bypass vecflow. Read them all (`queues: all`)"))
      << log();
}

// `other_queues: drop`: the XDP program drops what it would lift from queue 1, counted as
// queue_not_read (steering, errors, status); what came in on queue 0 is forwarded.
TEST_F(RxQueues, OtherQueuesDropDropsAndCountsTheFramesOfTheOtherQueues) {
  start("    queues: 1\n    other_queues: drop\n");
  ASSERT_TRUE(daemon_->wait_ready(socket_)) << log();
  ASSERT_TRUE(wait_links_up()) << ctl("status").out;
  EXPECT_THAT(log(), testing::HasSubstr("port wan: reads 1 of the 2 rx queues of wan0 (0); "
                                        "queue 1: dropped (other_queues: drop), counted as "
                                        "queue_not_read"));
  // The box's own kernel resolves the server; vecflowd learns it from the kernel.
  ASSERT_EQ(lab_->exec('a', "ping -c 1 -W 2 198.51.100.2 >/dev/null"), 0);
  ASSERT_TRUE(wait_server_neighbour()) << json("neighbours").dump();
  const uint64_t hits0 = flood_hits(), not_read0 = wan_steering("queue_not_read");
  const uint64_t server0 = server_no_ports();
  constexpr uint64_t kDatagrams = 400;
  send_udp(kDatagrams);
  const uint64_t not_read_total = wan_steering("queue_not_read");
  const Json errors = json("errors");
  const uint64_t not_read = not_read_total - not_read0;
  const uint64_t received = server_no_ports() - server0;
  // Every datagram met the flood rule; those the client hashed to queue 1 were dropped, the
  // others forwarded.
  EXPECT_EQ(flood_hits() - hits0, kDatagrams);
  EXPECT_GT(not_read, kDatagrams / 10);
  EXPECT_GT(received, kDatagrams / 10);
  EXPECT_GE(received + not_read, kDatagrams);
  uint64_t dropped = 0;
  for (const auto& w : errors["by_port"])
    if (w["port"] == "wan" && w["reason"] == "queue_not_read" && w["layer"] == "xdp")
      dropped = w["count"].get<uint64_t>();
  // `errors` is read between two reads of the steering counter: the kernel's own frames
  // (neighbour discovery) may land on queue 1 meanwhile, so it lies between them.
  EXPECT_GE(dropped, not_read_total) << errors.dump();
  EXPECT_LE(dropped, wan_steering("queue_not_read")) << errors.dump();
  const Json st = wan_rx_queues();
  EXPECT_EQ(st["read_queues"], "0") << st.dump();
  EXPECT_EQ(st["interface_queues"], 2) << st.dump();
  EXPECT_EQ(st["unread_queues"], "1") << st.dump();
  EXPECT_EQ(st["other_queues"], "drop") << st.dump();
  EXPECT_EQ(st["state"], "unread: dropped") << st.dump();
  EXPECT_GE(st["queue_not_read"].get<uint64_t>(), not_read) << st.dump();
}

// `other_queues: pass`: what the XDP program would lift from queue 1 goes to the kernel,
// counted as queue_not_read and as passed, never as a drop.
TEST_F(RxQueues, OtherQueuesPassHandsTheFramesOfTheOtherQueuesToTheKernelCounted) {
  start("    queues: 1\n    other_queues: pass\n");
  ASSERT_TRUE(daemon_->wait_ready(socket_)) << log();
  ASSERT_TRUE(wait_links_up()) << ctl("status").out;
  const uint64_t not_read0 = wan_steering("queue_not_read"), pass0 = wan_steering("pass");
  send_udp(400);
  const uint64_t not_read = wan_steering("queue_not_read") - not_read0;
  EXPECT_GT(not_read, 400u / 10);
  EXPECT_GE(wan_steering("pass") - pass0, not_read);
  const Json errors = json("errors");  // a named value: the loop must not outlive it
  for (const auto& w : errors["by_port"])
    EXPECT_NE(w["reason"], "queue_not_read") << w.dump();
  const Json st = wan_rx_queues();
  EXPECT_EQ(st["other_queues"], "pass") << st.dump();
  EXPECT_EQ(st["state"], "unread: to kernel") << st.dump();
}

// The default reads every rx queue of wan0, and vecflowd starts with 2 of its 4 channels:
// the flows hashed to either are lifted and forwarded; a third channel at run time is
// reported in `status` and the log, and so is its removal.
class RxQueuesAll : public RxQueuesBase {
 protected:
  int lab_queues() const override { return 4; }
  void prepare_lab() override {
    // XDP on a veth needs at least as many rx queues as its peer has tx queues: both sides
    // of each pair change together. lan0 keeps one queue, read by DPDK as in the demo.
    ASSERT_EQ(lab_->exec('a', "ethtool -L wan0 rx 2 tx 2 && ethtool -L lan0 rx 1 tx 1"), 0);
    ASSERT_EQ(lab_->exec('c', "ethtool -L eth0 rx 2 tx 2"), 0);
    ASSERT_EQ(lab_->exec('s', "ethtool -L eth0 rx 1 tx 1"), 0);
  }
  std::string edit_config(std::string text) override {
    return std::regex_replace(text, std::regex("\n    queues: 1\n"), "\n");  // queues: all
  }

  // Per-queue rx packets of wan, by queue index.
  std::map<uint64_t, uint64_t> wan_queue_rx() {
    std::map<uint64_t, uint64_t> out;
    const Json ports = json("ports");
    for (const auto& q : ports["queues"])
      if (q["port"] == "wan") out[q["queue"].get<uint64_t>()] = q["rx_packets"].get<uint64_t>();
    return out;
  }
};

TEST_F(RxQueuesAll, EveryQueueIsReadAndTheFlowsOfEachAreForwarded) {
  EXPECT_THAT(log(), testing::HasSubstr("port wan: reads every rx queue of wan0 (2: 0-1)"));
  const Json st = wan_rx_queues();
  EXPECT_EQ(st["read"], 2) << st.dump();
  EXPECT_EQ(st["interface_queues"], 2) << st.dump();
  EXPECT_TRUE(st["unread_queues"].is_null()) << st.dump();
  EXPECT_EQ(st["state"], "every queue read") << st.dump();

  auto q0 = wan_queue_rx();
  const uint64_t not_read0 = wan_steering("queue_not_read");
  const uint64_t no_socket0 = wan_steering("no_socket_fallbacks");
  const uint64_t hits0 = flood_hits(), server0 = server_no_ports();
  constexpr uint64_t kDatagrams = 400;
  send_udp(kDatagrams);
  auto acc = settled_accounting();
  auto q = wan_queue_rx();
  ASSERT_EQ(q.size(), 2u) << json("ports").dump();
  // Both queues carried a share of the datagrams, each lifted to vecflowd and forwarded.
  for (uint64_t i : {0u, 1u})
    EXPECT_GT(q[i] - q0[i], kDatagrams / 10) << "queue " << i;
  EXPECT_EQ(flood_hits() - hits0, kDatagrams);
  EXPECT_EQ(server_no_ports() - server0, kDatagrams);
  EXPECT_EQ(wan_steering("queue_not_read"), not_read0);
  EXPECT_EQ(wan_steering("no_socket_fallbacks"), no_socket0);
  expect_exact(acc);
}

TEST_F(RxQueuesAll, AChannelChangeAtRunTimeIsReportedInStatusAndTheLog) {
  // A third channel on both ends: the client now hashes flows over three queues of wan0.
  ASSERT_EQ(lab_->exec('a', "ethtool -L wan0 rx 3 tx 3"), 0);
  ASSERT_EQ(lab_->exec('c', "ethtool -L eth0 rx 3 tx 3"), 0);
  Json st;
  for (int i = 0; i < 50; ++i) {
    st = wan_rx_queues();
    if (st["interface_queues"] == 3) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(st["interface_queues"], 3) << st.dump();
  EXPECT_EQ(st["interface_queues_at_start"], 2) << st.dump();
  EXPECT_EQ(st["read_queues"], "0-1") << st.dump();
  EXPECT_EQ(st["unread_queues"], "2") << st.dump();
  EXPECT_EQ(st["changes"], 1) << st.dump();
  EXPECT_EQ(st["state"], "unread: to kernel") << st.dump();
  EXPECT_THAT(ctl("status").out, testing::HasSubstr("unread: to kernel"));
  EXPECT_THAT(log(), testing::HasSubstr(
                         "port wan: interface wan0 now has 3 rx queues (was 2); vecflow reads 2 "
                         "(0-1): frames for user space on queue 2 are passed to the kernel "
                         "(other_queues unset), counted as queue_not_read until vecflowd "
                         "restarts"));

  // What the frames of queue 2 meet is not checked here: a veth given a channel while XDP is
  // attached does not run the program on it (the kernel hands those frames to its stack
  // directly); a NIC re-creates every channel with the program. steer_bpf_test checks that a
  // queue outside the port's read queues gets other_queues, counted.

  // Back to two: every queue read again, the second change logged too.
  ASSERT_EQ(lab_->exec('c', "ethtool -L eth0 rx 2 tx 2"), 0);
  ASSERT_EQ(lab_->exec('a', "ethtool -L wan0 rx 2 tx 2"), 0);
  for (int i = 0; i < 50; ++i) {
    st = wan_rx_queues();
    if (st["interface_queues"] == 2) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(st["changes"], 2) << st.dump();
  EXPECT_EQ(st["state"], "every queue read") << st.dump();
  EXPECT_THAT(log(), testing::HasSubstr("port wan: interface wan0 now has 2 rx queues (was 3); "
                                        "vecflow reads 2 (0-1): it reads every one"));
}

}  // namespace
}  // namespace vecflow::test
