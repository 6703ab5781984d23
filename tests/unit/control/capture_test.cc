// Captures: the command and its files, with a test tap standing in for the hook points the
// pipeline provides. The files are read back with libpcap, as tcpdump would, and block by block.
#include <gtest/gtest.h>

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "control/capture.h"
#include "server_fixture.h"
#include "support/eal_env.h"
#include "support/pcapng_file.h"

namespace vecflow::control {
namespace {

using namespace std::chrono_literals;

// The hook points' side, as a test double: remembers the attached captures.
class TestTap final : public PacketTap {
 public:
  struct Tapped {
    PortId port;
    std::shared_ptr<PcapngCapture> capture;
  };
  Result<void> attach(PortId port, std::shared_ptr<PcapngCapture> capture) override {
    sinks.push_back({port, std::move(capture)});
    return {};
  }
  void detach(const PcapngCapture* capture) noexcept override {
    std::erase_if(sinks, [capture](const auto& s) { return s.capture.get() == capture; });
  }
  std::vector<Tapped> sinks;
};

rte_mempool* packet_pool() {
  static rte_mempool* pool =
      rte_pktmbuf_pool_create("vct_cap_test", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return pool;
}

// An Ethernet/IPv4/UDP (or TCP when proto is 6) frame of `len` bytes to `dst_port`.
rte_mbuf* frame(uint8_t proto, uint16_t dst_port, uint16_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(packet_pool());
  char* p = rte_pktmbuf_append(m, len);
  std::memset(p, 0, len);
  auto* eth = reinterpret_cast<rte_ether_hdr*>(p);
  eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
  ip->version_ihl = 0x45;
  ip->total_length = rte_cpu_to_be_16(len - sizeof(rte_ether_hdr));
  ip->time_to_live = 64;
  ip->next_proto_id = proto;
  ip->src_addr = rte_cpu_to_be_32(0xc0000202);
  ip->dst_addr = rte_cpu_to_be_32(0xc6336402);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
  udp->src_port = rte_cpu_to_be_16(40000);
  udp->dst_port = rte_cpu_to_be_16(dst_port);
  return m;
}

std::vector<vecflow::test::CapturedPacket> read_pcap(const std::string& path,
                                                     const std::vector<std::string>& interfaces) {
  auto f = vecflow::test::read_capture(path);
  EXPECT_EQ(f.error, "") << path;
  EXPECT_EQ(f.datalink, 1);  // Ethernet
  EXPECT_EQ(f.interfaces, interfaces);
  return f.packets;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

class CaptureTest : public test::ServerFixture {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    ServerFixture::SetUp();
    captures_ = std::make_unique<CaptureManager>(*server_, tap_, dir_ + "/captures",
                                                 std::vector<std::string>{"wan", "lan"});
    captures_->register_commands(registry_);
  }
  void TearDown() override {
    captures_.reset();
    ServerFixture::TearDown();
  }
  void offer(CaptureDirection dir, std::vector<rte_mbuf*> pkts) {
    for (auto& s : tap_.sinks)
      s.capture->capture(pkts, dir, s.port);
    for (auto* m : pkts)
      rte_pktmbuf_free(m);  // the data path keeps its packets: the sink copied them
  }

  TestTap tap_;
  std::unique_ptr<CaptureManager> captures_;
};

TEST_F(CaptureTest, WritesWhatTheTapOffersUntilStopped) {
  Json r = call("capture-start", {{"port", "wan"}, {"file", "a.pcapng"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  ASSERT_EQ(tap_.sinks.size(), 1u);
  EXPECT_EQ(tap_.sinks[0].port, static_cast<PortId>(0));
  const uint64_t before = now_ns();
  offer(kCaptureRx, {frame(17, 53, 100), frame(6, 22, 200)});
  offer(kCaptureTx, {frame(17, 53, 60)});
  pump(50ms);
  Json list = call("captures", Json::object());
  EXPECT_EQ(list["result"]["captures"][0]["packets"], 3);
  EXPECT_EQ(list["result"]["captures"][0]["state"], "running");
  Json s = call("capture-stop", Json::object());
  ASSERT_TRUE(s["ok"].get<bool>()) << s.dump();
  EXPECT_TRUE(tap_.sinks.empty());
  const uint64_t after = now_ns();
  auto pkts = read_pcap(dir_ + "/captures/a.pcapng", {"wan"});
  ASSERT_EQ(pkts.size(), 3u);
  EXPECT_EQ(pkts[0].len, 100u);
  EXPECT_EQ(pkts[1].caplen, 200u);
  // Direction in epb_flags: inbound, inbound, outbound; the real time of the copy.
  EXPECT_EQ(pkts[0].flags, 1u);
  EXPECT_EQ(pkts[1].flags, 1u);
  EXPECT_EQ(pkts[2].flags, 2u);
  for (const auto& p : pkts) {
    EXPECT_EQ(p.interface, 0u);
    EXPECT_GE(p.ts_ns + 1'000'000'000u, before);
    EXPECT_LE(p.ts_ns, after + 1'000'000'000u);
  }
}

TEST_F(CaptureTest, FilterSnaplenAndCountApply) {
  Json r = call("capture-start", {{"port", "lan"},
                                  {"direction", "rx"},
                                  {"filter", "udp dst port 53"},
                                  {"snaplen", 64},
                                  {"count", 2},
                                  {"file", "dns.pcapng"}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  offer(kCaptureTx, {frame(17, 53, 100)});  // wrong direction
  offer(kCaptureRx, {frame(6, 53, 100), frame(17, 53, 300), frame(17, 80, 100), frame(17, 53, 120),
                     frame(17, 53, 130)});
  pump(100ms);
  EXPECT_TRUE(tap_.sinks.empty()) << "count reached: the tap is let go";
  Json list = call("captures", Json::object());
  EXPECT_EQ(list["result"]["captures"][0]["ended"], "count reached");
  auto pkts = read_pcap(dir_ + "/captures/dns.pcapng", {"lan"});
  ASSERT_EQ(pkts.size(), 2u);
  EXPECT_EQ(pkts[0].caplen, 64u);
  EXPECT_EQ(pkts[0].len, 300u);
  EXPECT_EQ(pkts[1].len, 120u);
}

TEST_F(CaptureTest, DurationEndsACapture) {
  Json r = call("capture-start", {{"port", "wan"}, {"duration_s", 0.1}});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  pump(400ms);
  Json list = call("captures", Json::object());
  EXPECT_EQ(list["result"]["captures"][0]["ended"], "duration reached");
  std::string file = list["result"]["captures"][0]["file"];
  EXPECT_TRUE(file.starts_with(dir_ + "/captures/wan-"));
  EXPECT_TRUE(read_pcap(file, {"wan"}).empty());
}

TEST_F(CaptureTest, RefusesBadRequests) {
  auto code = [&](Json args) {
    Json r = call("capture-start", args);
    return r["ok"].get<bool>() ? std::string("ok") : r["error"]["message"].get<std::string>();
  };
  EXPECT_NE(code({{"port", "dmz"}}).find("no port 'dmz'"), std::string::npos);
  EXPECT_NE(code({{"port", "wan"}, {"file", "../../etc/x"}}).find("plain name"), std::string::npos);
  EXPECT_NE(code({{"port", "wan"}, {"filter", "udp port banana"}}).find("filter"),
            std::string::npos);
  EXPECT_NE(code({{"port", "wan"}, {"direction", "up"}}).find("direction"), std::string::npos);
  EXPECT_EQ(code({{"port", "wan"}, {"file", "x.pcapng"}}), "ok");
  EXPECT_NE(code({{"port", "wan"}, {"file", "x.pcapng"}}).find("File exists"), std::string::npos);
  EXPECT_EQ(call("capture-stop", {{"id", 99}})["error"]["code"], "failed");
  EXPECT_EQ(call("capture-start", Json::object())["error"]["code"], "bad_arguments");
}

TEST_F(CaptureTest, ALimitedNumberRunAtOnce) {
  for (size_t i = 0; i < CaptureManager::kMaxCaptures; ++i)
    ASSERT_TRUE(call("capture-start", {{"port", "wan"}})["ok"].get<bool>());
  Json r = call("capture-start", {{"port", "wan"}});
  EXPECT_NE(r["error"]["message"].get<std::string>().find("stop one first"), std::string::npos);
}

}  // namespace
}  // namespace vecflow::control
