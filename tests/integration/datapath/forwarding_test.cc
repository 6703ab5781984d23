// vecflowd forwards between the lab's namespaces, on the demo's topology and configuration:
// AF_XDP on wan0, DPDK's net_af_xdp on lan0, steering keeping ARP and SSH in the kernel, the
// rest routed in user space through vectors. Every test ends with the accounting identity per
// port (rx = tx + kernel + dropped, nothing in flight) and checks what the hosts saw against
// what vecflowd counted.
#include <fstream>
#include <map>

#include "corpus.h"
#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

TEST_F(Forwarding, PingCrossesInBothDirections) {
  EXPECT_EQ(lab_->exec('c', "ping -c 5 -i 0.2 -W 1 198.51.100.2 >/dev/null"), 0);
  EXPECT_EQ(lab_->exec('s', "ping -c 5 -i 0.2 -W 1 192.0.2.2 >/dev/null"), 0);
  Json a = settled_accounting();
  expect_exact(a);
  // Each echo entered on one port and left on the other: 10 in on each side, all forwarded.
  EXPECT_GE(port(a, "wan")["tx_packets"].get<uint64_t>(), 10u)
      << a.dump() << json("errors").dump() << log();
  EXPECT_GE(port(a, "lan")["tx_packets"].get<uint64_t>(), 10u)
      << a.dump() << json("errors").dump() << log();
}

// The appliance's kernel does not forward, so a packet to a next hop vecflow has not resolved
// yet, handed to that kernel, was lost: the first datagram to a fresh server in about half the
// runs, and the first ping always. The demo's `unresolved: hold` keeps such packets while the
// kernel resolves the next hop, and sends them then.
class FreshNeighbours : public Forwarding {
 protected:
  bool resolve_first() const override { return false; }
};

TEST_F(FreshNeighbours, TheFirstDatagramAndTheFirstPingToAFreshServerCross) {
  Json n = json("neighbours");
  for (const auto& e : n["entries"])
    EXPECT_NE(e["ip"], "198.51.100.2") << "the server is not fresh: " << n.dump();
  const std::string out = dir_ + "/datagram";
  std::thread server([&] { lab_->exec('s', "timeout 4 nc -u -l -p 5002 > " + out); });
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(lab_->exec('c', "bash -c \"echo first > /dev/udp/198.51.100.2/5002\""), 0);
  server.join();
  std::ifstream f(out);
  std::string got((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(got, "first\n") << json("errors").dump() << log();
  // It was held, then sent: not handed to the kernel.
  n = json("neighbours");
  ASSERT_EQ(n["stages"].size(), 1u) << n.dump();
  EXPECT_EQ(n["stages"][0]["unresolved_policy"], "hold");
  EXPECT_GE(n["stages"][0]["held_sent"].get<uint64_t>(), 1u) << n.dump();
  EXPECT_EQ(n["stages"][0]["held_dropped"].get<uint64_t>(), 0u) << n.dump();

  // The other way, to a client the appliance may not know yet either: the first ping crosses.
  EXPECT_EQ(lab_->exec('s', "ping -c 1 -W 2 192.0.2.2 >/dev/null"), 0)
      << json("errors").dump() << log();
  Json a = settled_accounting();
  expect_exact(a);
  EXPECT_EQ(port(a, "wan")["held"], 0) << a.dump();
  EXPECT_EQ(port(a, "lan")["held"], 0) << a.dump();
}

// Nobody has 198.51.100.77: a packet to it waits hold_timeout_ms (3 s) and is dropped then;
// one still waiting when vecflowd stops is dropped before the final accounting.
TEST_F(FreshNeighbours, PacketsToANextHopThatNeverAnswersAreDroppedInTimeAndAtStop) {
  EXPECT_NE(lab_->exec('c', "ping -c 1 -W 1 198.51.100.77 >/dev/null"), 0);
  Json a = json("accounting")["ports"];
  EXPECT_EQ(port(a, "wan")["held"], 1) << a.dump();
  std::this_thread::sleep_for(3s);
  a = settled_accounting();
  expect_exact(a);
  EXPECT_EQ(port(a, "wan")["held"], 0) << a.dump();
  Json n = json("neighbours");
  EXPECT_EQ(n["stages"][0]["held"], 1) << n.dump();
  EXPECT_EQ(n["stages"][0]["held_dropped"], 1) << n.dump();

  EXPECT_NE(lab_->exec('c', "ping -c 1 -W 1 198.51.100.77 >/dev/null"), 0);
  a = json("accounting")["ports"];
  EXPECT_EQ(port(a, "wan")["held"], 1) << a.dump();
  EXPECT_EQ(daemon_->stop(), 0) << log();
  daemon_.reset();
  const std::string l = log();
  EXPECT_NE(l.find("stopped cleanly"), std::string::npos) << l;
  EXPECT_TRUE(std::regex_search(
      l, std::regex("final accounting: port wan: [^\n]*neigh_unresolved:2[^\n]* unaccounted=0")))
      << l;
  EXPECT_FALSE(std::filesystem::exists("/var/run/dpdk/" + name_));
}

TEST_F(Forwarding, TcpTransferArrivesWhole) {
  const std::string in = dir_ + "/in", out = dir_ + "/out";
  ASSERT_EQ(run("head -c 2097152 /dev/urandom > " + in).rc, 0);
  std::thread server([&] { lab_->exec('s', "timeout 20 nc -d -l -p 5001 > " + out); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(lab_->exec('c', "timeout 20 nc -N -w 5 198.51.100.2 5001 < " + in), 0);
  server.join();
  EXPECT_EQ(run("cmp " + in + " " + out).rc, 0) << "the server got other bytes";
  Json a = settled_accounting();
  expect_exact(a);
  // 2 MiB in 1448-byte segments: at least 1449 packets each way through user space.
  EXPECT_GT(port(a, "wan")["tx_packets"].get<uint64_t>(), 1448u);
}

// Full-sized frames enter through the DPDK-owned queue on lan0 (its buffers must hold them).
TEST_F(Forwarding, TcpTransferFromTheServerSideArrivesWhole) {
  const std::string in = dir_ + "/in", out = dir_ + "/out";
  ASSERT_EQ(run("head -c 2097152 /dev/urandom > " + in).rc, 0);
  std::thread client([&] { lab_->exec('c', "timeout 20 nc -d -l -p 5002 > " + out); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(lab_->exec('s', "timeout 20 nc -N -w 5 192.0.2.2 5002 < " + in), 0);
  client.join();
  EXPECT_EQ(run("cmp " + in + " " + out).rc, 0) << "the client got other bytes";
  Json a = settled_accounting();
  expect_exact(a);
  EXPECT_GT(port(a, "lan")["tx_packets"].get<uint64_t>(), 1448u);
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
  auto [acc0, steer0, errors0] = quiet_counters();
  std::string recv_json = dir_ + "/recv.json";
  std::thread receiver([&] {
    lab_->exec('s', std::string(TRAFGEN_PATH) +
                        " recv --dev eth0 --idle-exit 1500 --duration 30 "
                        "--json > " +
                        recv_json);
  });
  std::this_thread::sleep_for(300ms);
  constexpr uint64_t kPackets = 50000;
  ASSERT_EQ(
      lab_->exec('c', std::string(TRAFGEN_PATH) + " send --dev eth0 --dst 198.51.100.2 --dst-mac " +
                          wan_mac.substr(0, 17) +
                          " --flows 256 --size 60 --rate 50000 "
                          "--dst-port " +
                          std::to_string(kFloodPort) + " --count " + std::to_string(kPackets) +
                          " > /dev/null"),
      0);
  receiver.join();
  Json rx = Json::parse(std::ifstream(recv_json));
  auto [acc, steer, errors] = quiet_counters();
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
  EXPECT_EQ(rx["socket_drops"].get<uint64_t>(), 0u) << rx.dump();
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

// The malformed-traffic corpus replayed into wan0: every frame the kernel let the sender send
// met the XDP program, the ones the corpus says XDP drops are counted under their reasons, and
// `accounting` adds up on every layer: XDP's verdicts, what it lifted, what user space did.
TEST_F(Forwarding, MalformedCorpusIsAccountedFromXdpToTransmit) {
  std::ifstream mf(corpus_dir() + "/MANIFEST");
  auto manifest = parse_manifest(std::string(std::istreambuf_iterator<char>(mf), {}));
  ASSERT_TRUE(manifest) << manifest.error().message;
  const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
  std::string files;
  for (const auto& e : *manifest)
    files += " " + corpus_dir() + "/" + e.file;
  auto [acc0, steer0, errors0] = quiet_counters();
  Json sent = Json::parse(lab_->exec_output('c', std::string(TRAFGEN_PATH) +
                                                     " replay --json --dev eth0 --dst-mac " +
                                                     wan_mac.substr(0, 17) + files));
  auto [acc, steer, errors] = quiet_counters();

  // What XDP must have dropped, by reason: files the kernel sent whole (it refuses frames
  // shorter than an Ethernet header and frames above the MTU; their files send nothing).
  std::map<std::string, uint64_t> expected;
  ASSERT_EQ(sent["files"].size(), manifest->size());
  for (size_t i = 0; i < manifest->size(); ++i) {
    const ManifestEntry& e = (*manifest)[i];
    const uint64_t n = sent["files"][i]["sent"];
    if (n == 0) continue;
    ASSERT_EQ(n, e.frames) << e.file << " was sent in part: " << sent["files"][i].dump();
    if (e.xdp.kind == Outcome::Drop) expected[std::string(drop_reason_name(e.xdp.reason))] += n;
  }
  ASSERT_GT(sent["sent"].get<uint64_t>(), 80u) << sent.dump();
  ASSERT_GE(expected.size(), 10u);  // most drop reasons of the parser
  auto xdp_drops = [](const Json& errors) {
    std::map<std::string, uint64_t> by_reason;
    for (const auto& w : errors["by_port"])
      if (w["port"] == "wan" && w["layer"] == "xdp")
        by_reason[w["reason"]] += w["count"].get<uint64_t>();
    return by_reason;
  };
  auto before = xdp_drops(errors0), after = xdp_drops(errors);
  std::map<std::string, uint64_t> dropped;
  for (const auto& [reason, n] : after)
    if (n > before[reason]) dropped[reason] = n - before[reason];
  EXPECT_EQ(dropped, expected);

  const Json& wan0 = port(acc0, "wan");
  const Json& wan = port(acc, "wan");
  ASSERT_TRUE(wan["xdp"].is_object()) << wan.dump();
  // Every frame sent was seen (the hosts' kernels may add a few of their own).
  EXPECT_GE(wan["xdp"]["seen"].get<uint64_t>() - wan0["xdp"]["seen"].get<uint64_t>(),
            sent["sent"].get<uint64_t>());
  // The three equations, exactly, on both ports (lan is read by DPDK's net_af_xdp, with the
  // same XDP program).
  for (const auto& p : acc) {
    SCOPED_TRACE(p.dump());
    const Json& x = p["xdp"];
    ASSERT_TRUE(x.is_object());
    auto u = [](const Json& j, const char* k) { return j[k].get<uint64_t>(); };
    EXPECT_EQ(u(x, "seen"),
              u(x, "pass") + u(x, "dropped") + u(x, "sent") + u(x, "offloaded") + u(x, "lifted"));
    EXPECT_EQ(u(x, "lifted"), u(p, "device_dropped") + u(p, "port_dropped") + u(p, "rx_packets"));
    EXPECT_EQ(p["in_rings"], 0);
  }
  expect_exact(acc);
  // The human view shows the layer before user space.
  Exec human = ctl("accounting");
  EXPECT_NE(human.out.find("from the wire:"), std::string::npos) << human.out;
  EXPECT_TRUE(std::regex_search(human.out, std::regex("\\nwan +[0-9]+ +[0-9]+ +[0-9]+")))
      << human.out;
}

}  // namespace
}  // namespace vecflow::test
