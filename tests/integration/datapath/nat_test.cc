// NAT44 through vecflowd on the demo's topology: the lan (server namespace, 198.51.100.2)
// leaves from the box's wan address 192.0.2.1, and public ports of 192.0.2.1 are forwarded to
// it. Real hosts, real TCP, UDP and ICMP, compared with what the same hosts see through the
// Linux kernel's nftables NAT; the sessions vecflowctl shows; exact accounting.
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

constexpr int kLowPort = 20000, kHighPort = 29999;

void write_scripts(const std::string& dir);
std::map<std::string, std::string> scenarios(const Lab& lab, const std::string& dir);
std::vector<int> wan_peer_ports(const std::string& dir);

class Nat : public Forwarding {
 protected:
  std::string edit_config(std::string text) override {
    return replace_demo_acl(text, R"(  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: lan, src: 198.51.100.0/24, to: 192.0.2.1, ports: 20000-29999}
      dnat:
        - {proto: tcp, dst: 192.0.2.1, dst_port: 8080, to: 198.51.100.2, to_port: 5001}
        - {in_port: wan, proto: udp, dst: 192.0.2.1, dst_port: 8053, to: 198.51.100.2, to_port: 5353}
        - {in_port: wan, proto: udp, dst: 192.0.2.1, dst_port: 8054, to: 198.51.100.2, to_port: 5354})");
  }

  // The probes of scenarios() through vecflowd and through the Linux kernel's nftables NAT on
  // a lab of its own: the hosts see the same things.
  void see_what_linux_nat_shows() {
    write_scripts(dir_);
    // The reference: the same lab, its appliance translating in the kernel under nftables with
    // the same rules.
    Lab kernel(unique_name("vfk"));
    ASSERT_TRUE(kernel.ok());
    std::ofstream(dir_ + "/nat.nft")
        << "table ip nat {\n"
           "  chain prerouting {\n"
           "    type nat hook prerouting priority dstnat; policy accept;\n"
           "    ip daddr 192.0.2.1 tcp dport 8080 dnat to 198.51.100.2:5001\n"
           "    iifname \"wan0\" ip daddr 192.0.2.1 udp dport 8053 dnat to 198.51.100.2:5353\n"
           "    iifname \"wan0\" ip daddr 192.0.2.1 udp dport 8054 dnat to 198.51.100.2:5354\n"
           "  }\n"
           "  chain postrouting {\n"
           "    type nat hook postrouting priority srcnat; policy accept;\n"
           "    iifname \"lan0\" ip saddr 198.51.100.0/24 meta l4proto { tcp, udp } snat to "
           "192.0.2.1:20000-29999\n"
           "    iifname \"lan0\" ip saddr 198.51.100.0/24 snat to 192.0.2.1\n"
           "  }\n"
           "}\n";
    const std::string kdir = dir_ + "/kernel";
    std::filesystem::create_directories(kdir);
    write_scripts(kdir);
    ASSERT_EQ(kernel.exec('a', "sysctl -qw net.ipv4.ip_forward=1 && nft -f " + dir_ + "/nat.nft"),
              0);
    const auto linux_saw = scenarios(kernel, kdir);
    const auto vecflow_saw = scenarios(*lab_, dir_);
    EXPECT_EQ(vecflow_saw, linux_saw);
    // And the rules did something: the lan left from the box's address, the public ports were
    // forwarded (keeping the client's address), errors came back translated.
    EXPECT_EQ(linux_saw.at("tcp lan->wan"), "ok 192.0.2.1");
    EXPECT_EQ(linux_saw.at("udp wan->public port"), "ok 192.0.2.2");
    EXPECT_EQ(linux_saw.at("udp lan->wan, closed port"), "refused");
    EXPECT_EQ(linux_saw.at("udp wan->public port, closed"), "refused");
    EXPECT_EQ(linux_saw.at("tcp lan->public port (hairpin)"), "ok 192.0.2.1");
    EXPECT_EQ(linux_saw.at("udp lan->wan, 4000 bytes each way (fragments)"), "ok 192.0.2.1 4000");
    EXPECT_EQ(linux_saw.at("udp wan->public port, 4000 bytes each way (fragments)"),
              "ok 192.0.2.2 4000");
    for (const auto& [what, saw] : vecflow_saw)
      RecordProperty(what, saw);
    // The ports the lan's connections left from: the rule's range, as both translate.
    for (const std::string& d : {dir_, kdir}) {
      const auto ports = wan_peer_ports(d);
      EXPECT_EQ(ports.size(), 3u) << d;  // the TCP and the two UDP probes
      for (int p : ports) {
        EXPECT_GE(p, kLowPort) << d;
        EXPECT_LE(p, kHighPort) << d;
      }
    }
    expect_exact(settled_accounting());
  }

  uint64_t dropped(const std::string& reason) {
    const Json errors = json("errors");
    for (const auto& r : errors["reasons"])
      if (r["reason"] == reason) return r["count"].get<uint64_t>();
    ADD_FAILURE() << "no drop reason " << reason;
    return 0;
  }
};

// A probe (what a host sees of one connection attempt: "ok" and the address the server saw,
// or why not) and a server that answers with the address and port it saw, as files. A UDP
// probe given a size sends a datagram that large (fragmented above the MTU) and the server
// pads its answer to the same size: the probe then prints the size it got back too.
void write_scripts(const std::string& dir) {
  std::ofstream(dir + "/probe.py")
      << "import socket, sys\n"
         "kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
         "size = int(sys.argv[4]) if len(sys.argv) > 4 else 0\n"
         "try:\n"
         "    if kind == 'tcp':\n"
         "        s = socket.create_connection((host, port), timeout=2)\n"
         "    else:\n"
         "        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "        s.settimeout(2)\n"
         "        s.connect((host, port))\n"
         "    s.settimeout(2)\n"
         "    s.send(b'h' * size if size else b'hello')\n"
         "    r = s.recv(65535)\n"
         "    print('ok', r.decode().strip(), *([len(r)] if size else []))\n"
         "except ConnectionRefusedError:\n"
         "    print('refused')\n"
         "except (socket.timeout, TimeoutError):\n"
         "    print('timeout')\n"
         "except OSError as e:\n"
         "    print('error', e.errno)\n";
  // Serves until it has been idle for 8 s; logs "address port" of each peer to argv[3].
  std::ofstream(dir + "/whoami.py")
      << "import socket, sys\n"
         "kind, port, log = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], 'a')\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == 'tcp' else "
         "socket.SOCK_DGRAM)\n"
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind(('0.0.0.0', port))\n"
         "s.settimeout(8)\n"
         "if kind == 'tcp':\n"
         "    s.listen(8)\n"
         "try:\n"
         "    while True:\n"
         "        if kind == 'tcp':\n"
         "            c, a = s.accept()\n"
         "            c.settimeout(2)\n"
         "            c.recv(100)\n"
         "            c.sendall(a[0].encode())\n"
         "            c.close()\n"
         "        else:\n"
         "            d, a = s.recvfrom(65535)\n"
         "            s.sendto(a[0].encode().ljust(len(d) if len(d) > 1000 else 0), a)\n"
         "        print(a[0], a[1], file=log, flush=True)\n"
         "except (socket.timeout, TimeoutError):\n"
         "    pass\n";
}

// The same connection attempts, in order, through the lab's appliance; what the initiating
// host saw of each.
std::map<std::string, std::string> scenarios(const Lab& lab, const std::string& dir) {
  // Servers: on the wan host TCP 5002 and UDP 5355; on the lan host TCP 5001 and UDP 5353
  // (the targets of the public ports). Closed: wan's TCP 5003 and UDP 5354, lan's UDP 5354.
  for (const auto& [side, what] : std::initializer_list<std::pair<char, std::string>>{
           {'c', "tcp 5002"}, {'c', "udp 5355"}, {'s', "tcp 5001"}, {'s', "udp 5353"}})
    lab.exec(side, fmt::format("timeout 30 python3 {}/whoami.py {} {}/peers-{} >/dev/null 2>&1 &",
                               dir, what, dir, side));
  const auto listening = [&](char side, const std::string& tcp, const std::string& udp) {
    return lab.exec(side, "ss -Htln sport = :" + tcp + " | grep -q . && ss -Huln sport = :" + udp +
                              " | grep -q .") == 0;
  };
  for (int i = 0; i < 100 && !(listening('c', "5002", "5355") && listening('s', "5001", "5353"));
       ++i)
    std::this_thread::sleep_for(100ms);
  const auto probe = [&](char side, const std::string& what) {
    std::string out = lab.exec_output(side, "python3 " + dir + "/probe.py " + what);
    while (!out.empty() && out.back() == '\n')
      out.pop_back();
    return out;
  };
  std::map<std::string, std::string> seen;
  seen["tcp lan->wan"] = probe('s', "tcp 192.0.2.2 5002");
  seen["tcp lan->wan, closed port"] = probe('s', "tcp 192.0.2.2 5003");
  seen["udp lan->wan"] = probe('s', "udp 192.0.2.2 5355");
  seen["udp lan->wan, closed port"] = probe('s', "udp 192.0.2.2 5354");
  seen["udp lan->wan, 4000 bytes each way (fragments)"] = probe('s', "udp 192.0.2.2 5355 4000");
  seen["ping lan->wan"] =
      lab.exec('s', "ping -c 2 -i 0.2 -W 1 192.0.2.2 >/dev/null") == 0 ? "ok" : "lost";
  seen["tcp wan->public port"] = probe('c', "tcp 192.0.2.1 8080");
  seen["udp wan->public port"] = probe('c', "udp 192.0.2.1 8053");
  seen["udp wan->public port, closed"] = probe('c', "udp 192.0.2.1 8054");
  seen["udp wan->public port, 4000 bytes each way (fragments)"] =
      probe('c', "udp 192.0.2.1 8053 4000");
  seen["tcp lan->public port (hairpin)"] = probe('s', "tcp 192.0.2.1 8080");
  seen["tcp wan->lan, untranslated"] = probe('c', "tcp 198.51.100.2 5001");
  sh("pkill -f " + dir + "/whoami.py");
  return seen;
}

// Every peer port the wan host's servers logged: the ports the lan host's connections left
// from.
std::vector<int> wan_peer_ports(const std::string& dir) {
  std::ifstream in(dir + "/peers-c");
  std::vector<int> ports;
  std::string addr;
  int port;
  while (in >> addr >> port)
    ports.push_back(port);
  return ports;
}

TEST_F(Nat, HostsSeeWhatTheyWouldThroughLinuxNat) {
  see_what_linux_nat_shows();
}

// With flow offload on, the flows the probes establish are forwarded in XDP after their first
// packets, translated there: the hosts still see what they see through Linux.
class NatOffload : public Nat {
 protected:
  std::string edit_config(std::string text) override {
    return Nat::edit_config(std::move(text)) + "\noffload:\n    enabled: true\n    sweep_ms: 50\n";
  }
};

TEST_F(NatOffload, HostsSeeWhatTheyWouldThroughLinuxNat) {
  see_what_linux_nat_shows();
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "on") << o.dump();
  EXPECT_GT(o["summary"]["installed"].get<uint64_t>(), 0u) << o.dump();
}

TEST_F(Nat, ATransferLeavesFromThePoolAndTheSessionShowsItsTranslation) {
  // 256 KiB from the lan host to the wan host, through source NAT.
  const std::string in = dir_ + "/in", out = dir_ + "/out";
  ASSERT_EQ(run("head -c 262144 /dev/urandom > " + in).rc, 0);
  std::thread server([&] { lab_->exec('c', "timeout 20 nc -d -l -p 5001 > " + out); });
  for (int i = 0; i < 100; ++i) {
    if (lab_->exec('c', "ss -Htln sport = :5001 | grep -q .") == 0) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(lab_->exec('s', "timeout 20 nc -N -w 5 192.0.2.2 5001 < " + in), 0);
  server.join();
  EXPECT_EQ(run("cmp " + in + " " + out).rc, 0) << "the wan host got other bytes";

  const Json tcp = json("sessions --address 192.0.2.2 --port 5001");
  ASSERT_EQ(tcp["matched"], 1) << tcp.dump();
  EXPECT_EQ(tcp["session"]["src"], "198.51.100.2");  // keyed as the lan host sent it
  const std::string nat = tcp["session"]["nat"].get<std::string>();
  EXPECT_TRUE(std::regex_match(nat, std::regex("src as 192\\.0\\.2\\.1:2[0-9]{4}"))) << nat;
  EXPECT_GT(tcp["session"]["reply_packets"].get<uint64_t>(), 10u);
  const Exec text = ctl("sessions");
  EXPECT_NE(text.out.find("src as 192.0.2.1:"), std::string::npos) << text.out;
  const Json m = json("metrics --family vecflow_nat_ports_in_use");
  EXPECT_NE(m.dump().find("192.0.2.1"), std::string::npos) << m.dump();
  EXPECT_EQ(dropped("nat_no_port"), 0u);

  // A reload moves the source NAT to ports 30000-39999: the session keeps its mapping, a new
  // connection leaves from the new range.
  std::ifstream in_file(dir_ + "/appliance.yaml");
  std::string file((std::istreambuf_iterator<char>(in_file)), {});
  file = std::regex_replace(file, std::regex("ports: 20000-29999"), "ports: 30000-39999");
  std::ofstream(dir_ + "/reloaded.yaml") << file;
  const Json reply = json("reload " + dir_ + "/reloaded.yaml");
  EXPECT_TRUE(reply["restart_required"].empty()) << reply.dump();
  const Json kept = json("sessions --address 192.0.2.2 --port 5001");
  ASSERT_EQ(kept["matched"], 1) << kept.dump();
  EXPECT_EQ(kept["session"]["nat"], nat);
  write_scripts(dir_);
  lab_->exec('c', fmt::format("timeout 10 python3 {}/whoami.py tcp 5002 {}/peers-c >/dev/null "
                              "2>&1 &",
                              dir_, dir_));
  for (int i = 0; i < 100 && lab_->exec('c', "ss -Htln sport = :5002 | grep -q .") != 0; ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(lab_->exec_output('s', "python3 " + dir_ + "/probe.py tcp 192.0.2.2 5002"),
            "ok 192.0.2.1\n");
  sh("pkill -f " + dir_ + "/whoami.py");
  const auto ports = wan_peer_ports(dir_);
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_GE(ports[0], 30000);
  EXPECT_LE(ports[0], 39999);
  expect_exact(settled_accounting());
}

// Masquerade, reloaded in place of the pool: connections leave from wan0's address, and once
// the address changes, from the new one, which the wan host answers through vecflowd.
TEST_F(Nat, MasqueradeLeavesFromTheAddressWanHasNow) {
  std::ifstream in_file(dir_ + "/appliance.yaml");
  std::string file((std::istreambuf_iterator<char>(in_file)), {});
  file = std::regex_replace(file, std::regex("to: 192.0.2.1, ports"), "masquerade: wan, ports");
  std::ofstream(dir_ + "/reloaded.yaml") << file;
  const Json reply = json("reload " + dir_ + "/reloaded.yaml");
  EXPECT_TRUE(reply["restart_required"].empty()) << reply.dump();
  write_scripts(dir_);
  lab_->exec('c', fmt::format("timeout 20 python3 {}/whoami.py tcp 5002 {}/peers-c >/dev/null "
                              "2>&1 &",
                              dir_, dir_));
  for (int i = 0; i < 100 && lab_->exec('c', "ss -Htln sport = :5002 | grep -q .") != 0; ++i)
    std::this_thread::sleep_for(100ms);
  const std::string probe = "python3 " + dir_ + "/probe.py tcp 192.0.2.2 5002";
  EXPECT_EQ(lab_->exec_output('s', probe), "ok 192.0.2.1\n");

  ASSERT_EQ(lab_->exec('a',
                       "sysctl -qw net.ipv4.conf.wan0.promote_secondaries=1 && "
                       "ip addr add 192.0.2.3/24 dev wan0 && ip addr del 192.0.2.1/24 dev wan0"),
            0);
  std::string seen;
  for (int i = 0; i < 20 && seen != "ok 192.0.2.3\n"; ++i) {
    std::this_thread::sleep_for(100ms);
    seen = lab_->exec_output('s', probe);
  }
  EXPECT_EQ(seen, "ok 192.0.2.3\n");
  sh("pkill -f " + dir_ + "/whoami.py");
  const Exec text = ctl("sessions");
  EXPECT_NE(text.out.find("src as 192.0.2.3:"), std::string::npos) << text.out;
  EXPECT_EQ(dropped("nat_no_port"), 0u);
  expect_exact(settled_accounting());
}

}  // namespace
}  // namespace vecflow::test
