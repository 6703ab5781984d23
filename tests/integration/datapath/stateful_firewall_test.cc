// A stateful firewall through vecflowd, on the demo's topology: conntrack, then an acl that
// lets the client side (wan) open connections and the server side (lan) only answer them.
// Real hosts, real TCP, ICMP and UDP; the sessions vecflowctl shows; exact accounting.
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

void write_scripts(const std::string& dir);
std::map<std::string, std::string> scenarios(const Lab& lab, const std::string& dir);

class StatefulFirewall : public Forwarding {
 protected:
  // The firewall after the neighbour stage, as a FORWARD chain: what the neighbour stage
  // hands to the box's own kernel (its addresses) is not the firewall's, so the box's own
  // traffic (the fixture's pings from the appliance) keeps working.
  std::string edit_config(std::string text) override {
    return with_stateful_firewall(with_ipv6(std::move(text)));
  }

  // The probes of scenarios() through vecflowd and through the Linux kernel's nftables
  // conntrack on a lab of its own: the hosts see the same things.
  void see_what_linux_conntrack_shows() {
    write_scripts(dir_);
    // The reference: the same lab, its appliance forwarding in the kernel under nftables with
    // the same policy (replies in; new connections from wan only; invalid dropped).
    Lab kernel(unique_name("vfk"));
    ASSERT_TRUE(kernel.ok());
    std::ofstream(dir_ + "/fw.nft") << "table inet fw {\n"
                                       "  chain forward {\n"
                                       "    type filter hook forward priority 0; policy drop;\n"
                                       "    ct state invalid drop\n"
                                       "    ct state established,related accept\n"
                                       "    iifname \"wan0\" ct state new accept\n"
                                       "  }\n"
                                       "}\n";
    ASSERT_EQ(kernel.exec('a',
                          "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 && "
                          "nft -f " +
                              dir_ + "/fw.nft"),
              0);
    const auto linux_saw = scenarios(kernel, dir_);
    const auto vecflow_saw = scenarios(*lab_, dir_);
    EXPECT_EQ(vecflow_saw, linux_saw);
    // And the policy did something: allowed, refused by the far end, and dropped alike.
    EXPECT_EQ(linux_saw.at("tcp wan->lan"), "ok");
    EXPECT_EQ(linux_saw.at("udp wan->lan, closed port"), "refused");
    EXPECT_EQ(linux_saw.at("tcp lan->wan"), "timeout");
    EXPECT_EQ(linux_saw.at("udp wan->lan, a 4000-byte answer (fragments)"), "ok");
    EXPECT_EQ(linux_saw.at("udp6 wan->lan, a 4000-byte answer (fragments)"), "ok");
    for (const auto& [what, saw] : vecflow_saw)
      RecordProperty(what, saw);
    expect_exact(settled_accounting());
  }

  // Waits (up to 10 s) until a server on `side` listens on TCP `port`.
  void wait_listening(char side, int port) {
    for (int i = 0; i < 100; ++i) {
      if (lab_->exec(side, "ss -Htln sport = :" + std::to_string(port) + " | grep -q .") == 0)
        return;
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "nothing listens on TCP " << port;
  }

  // A TCP connection from the client (wan) to the server's port 5001, from `client_port` (0:
  // any): it sends "before", waits 3 s, sends " after" and closes. end_long_connection() waits
  // for both ends and returns what the server received.
  void start_long_connection(int client_port) {
    std::ofstream(dir_ + "/long.py") << "import socket, sys, time\n"
                                        "s = socket.create_connection(('198.51.100.2', 5001), 3, "
                                        "('0.0.0.0', int(sys.argv[1])))\n"
                                        "s.sendall(b'before')\n"
                                        "time.sleep(3)\n"
                                        "s.sendall(b' after')\n"
                                        "s.shutdown(socket.SHUT_WR)\n"
                                        "print(s.recv(100).decode())\n";
    long_server_ =
        std::thread([this] { lab_->exec('s', "timeout 15 nc -d -l -p 5001 > " + dir_ + "/got"); });
    wait_listening('s', 5001);
    long_client_ = std::thread([this, client_port] {
      lab_->exec('c', fmt::format("timeout 12 python3 {}/long.py {} > {}/client.out 2>&1", dir_,
                                  client_port, dir_));
    });
    std::this_thread::sleep_for(1s);
  }
  std::string end_long_connection() {
    long_client_.join();
    long_server_.join();
    return run("cat " + dir_ + "/got").out;
  }
  // A test that failed half-way still waits for its connection's ends (they time out).
  ~StatefulFirewall() override {
    if (long_client_.joinable()) long_client_.join();
    if (long_server_.joinable()) long_server_.join();
  }
  std::thread long_server_, long_client_;

  uint64_t dropped(const std::string& reason) {
    const Json errors = json("errors");
    for (const auto& r : errors["reasons"])
      if (r["reason"] == reason) return r["count"].get<uint64_t>();
    ADD_FAILURE() << "no drop reason " << reason;
    return 0;
  }

  uint64_t acl_hits(const std::string& rule) {
    const Json acl = json("acl");
    for (const auto& r : acl["rules"])
      if (r["rule"] == rule) return r["packets"].get<uint64_t>();
    ADD_FAILURE() << "no acl rule " << rule;
    return 0;
  }
};

TEST_F(StatefulFirewall, ConnectionsFromWanCrossAndTheirRepliesComeBack) {
  // TCP, client (wan) to server (lan): the whole transfer, both directions of it.
  const std::string in = dir_ + "/in", out = dir_ + "/out";
  ASSERT_EQ(run("head -c 262144 /dev/urandom > " + in).rc, 0);
  std::thread server([&] { lab_->exec('s', "timeout 20 nc -d -l -p 5001 > " + out); });
  wait_listening('s', 5001);
  EXPECT_EQ(lab_->exec('c', "timeout 20 nc -N -w 5 198.51.100.2 5001 < " + in), 0);
  server.join();
  EXPECT_EQ(run("cmp " + in + " " + out).rc, 0) << "the server got other bytes";
  // ICMP echo, UDP with an answer.
  EXPECT_EQ(lab_->exec('c', "ping -c 3 -i 0.2 -W 1 198.51.100.2 >/dev/null"), 0);
  // UDP: one datagram and its answer (a small server and client in files: no quoting).
  std::ofstream(dir_ + "/udp_server.py") << "import socket\n"
                                            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                                            "s.bind(('0.0.0.0', 5353))\n"
                                            "s.settimeout(5)\n"
                                            "d, a = s.recvfrom(100)\n"
                                            "s.sendto(b'pong', a)\n";
  std::ofstream(dir_ + "/udp_client.py") << "import socket\n"
                                            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                                            "s.settimeout(3)\n"
                                            "s.sendto(b'ping', ('198.51.100.2', 5353))\n"
                                            "print(s.recv(100).decode())\n";
  std::thread udp_server([&] { lab_->exec('s', "timeout 6 python3 " + dir_ + "/udp_server.py"); });
  std::this_thread::sleep_for(500ms);
  Exec answer =
      run("ip netns exec " + lab_->ns('c') + " timeout 4 python3 " + dir_ + "/udp_client.py");
  udp_server.join();
  EXPECT_NE(answer.out.find("pong"), std::string::npos) << answer.out << answer.err;

  // The sessions: the TCP one found by its address and port, closed in time_wait.
  Json tcp = json("sessions --address 198.51.100.2 --port 5001");
  ASSERT_EQ(tcp["matched"], 1) << tcp.dump();
  EXPECT_EQ(tcp["session"]["proto"], "tcp");
  EXPECT_EQ(tcp["session"]["src"], "192.0.2.2");
  EXPECT_EQ(tcp["session"]["dst_port"], 5001);
  EXPECT_EQ(tcp["session"]["state"], "time_wait") << tcp.dump();
  EXPECT_TRUE(tcp["session"]["windows_checked"].get<bool>());
  EXPECT_GT(tcp["session"]["orig_packets"].get<uint64_t>(), 100u);
  EXPECT_GT(tcp["session"]["reply_packets"].get<uint64_t>(), 10u);
  Json echo = json("sessions --state icmp_replied");
  EXPECT_EQ(echo["matched"], 1) << echo.dump();
  Json udp = json("sessions --port 5353");
  ASSERT_EQ(udp["matched"], 1) << udp.dump();
  EXPECT_EQ(udp["session"]["state"], "udp_assured");

  // What vecflowctl prints.
  Exec text = ctl("sessions");
  EXPECT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("time_wait"), std::string::npos) << text.out;
  // Nothing was invalid, nothing was refused, every packet of the three had a rule.
  Json m = json("metrics --family vecflow_conntrack");
  EXPECT_NE(m.dump().find("vecflow_conntrack_packets_total"), std::string::npos) << m.dump();
  EXPECT_EQ(dropped("ct_invalid"), 0u);
  EXPECT_EQ(dropped("ct_table_full"), 0u);

  Json a = settled_accounting();
  expect_exact(a);
}

TEST_F(StatefulFirewall, NothingNewGetsInFromLan) {
  // The server side opens nothing: a TCP connection, a ping, are refused (acl_deny).
  std::thread listener([&] { lab_->exec('c', "timeout 4 nc -d -l -p 5002 >/dev/null"); });
  wait_listening('c', 5002);
  EXPECT_NE(lab_->exec('s', "echo hi | timeout 3 nc -N -w 2 192.0.2.2 5002"), 0);
  EXPECT_NE(lab_->exec('s', "ping -c 2 -i 0.2 -W 1 192.0.2.2 >/dev/null"), 0);
  listener.join();
  EXPECT_EQ(acl_hits("replies"), 0u);
  EXPECT_EQ(acl_hits("from-wan"), 0u);
  EXPECT_GE(acl_hits("default"), 3u);  // SYN (and its retries), two echo requests

  EXPECT_GE(dropped("acl_deny"), 3u);
  Json a = settled_accounting();
  expect_exact(a);
}

// ---- against Linux -------------------------------------------------------------------------

// A probe (what a host sees of one connection attempt) and an echo server, as files. A UDP
// probe given a size asks for an answer that large (fragmented above the MTU) with a small
// request: only the answer's first fragment names the connection.
void write_scripts(const std::string& dir) {
  std::ofstream(dir + "/probe.py")
      << "import socket, sys\n"
         "kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
         "size = int(sys.argv[4]) if len(sys.argv) > 4 else 0\n"
         "data, want = (b'size %d' % size, b'h' * size) if size else (b'hello', b'hello')\n"
         "family = socket.AF_INET6 if ':' in host else socket.AF_INET\n"
         "try:\n"
         "    if kind == 'tcp':\n"
         "        s = socket.create_connection((host, port), timeout=2)\n"
         "    else:\n"
         "        s = socket.socket(family, socket.SOCK_DGRAM)\n"
         "        s.settimeout(2)\n"
         "        s.connect((host, port))\n"
         "    s.settimeout(2)\n"
         "    s.send(data)\n"
         "    print('ok' if s.recv(65535) == want else 'bad')\n"
         "except ConnectionRefusedError:\n"
         "    print('refused')\n"
         "except (socket.timeout, TimeoutError):\n"
         "    print('timeout')\n"
         "except OSError as e:\n"
         "    print('error', e.errno)\n";
  std::ofstream(dir + "/echo.py")
      << "import socket, sys\n"
         "kind, port = sys.argv[1], int(sys.argv[2])\n"
         "s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM if kind == 'tcp' else "
         "socket.SOCK_DGRAM)\n"
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
         "s.bind(('::', port))\n"
         "s.settimeout(8)\n"
         "if kind == 'tcp':\n"
         "    s.listen(1)\n"
         "    c, _ = s.accept()\n"
         "    c.sendall(c.recv(100))\n"
         "    c.close()\n"
         "else:\n"
         "    d, a = s.recvfrom(100)\n"
         "    s.sendto(b'h' * int(d[5:]) if d.startswith(b'size ') else d, a)\n";
}

// The same connection attempts, in order; what the initiating host saw of each.
std::map<std::string, std::string> scenarios(const Lab& lab, const std::string& dir) {
  // Servers (IPv4 and IPv6): TCP 5001 and UDP 5353, 5356 and 5357 on the server, TCP 5002
  // and UDP 5355 on the client; TCP 5003 and UDP 5354 closed (a reset, a port unreachable).
  for (const auto& [side, what] :
       std::initializer_list<std::pair<char, std::string>>{{'s', "tcp 5001"},
                                                           {'s', "udp 5353"},
                                                           {'s', "udp 5356"},
                                                           {'s', "udp 5357"},
                                                           {'c', "tcp 5002"},
                                                           {'c', "udp 5355"}})
    lab.exec(side, "timeout 10 python3 " + dir + "/echo.py " + what + " >/dev/null 2>&1 &");
  // Every server listening before the first probe (python starts slowly on a loaded machine).
  const auto listening = [&](char side, const std::string& tcp, const std::string& udp) {
    return lab.exec(side, "ss -Htln sport = :" + tcp + " | grep -q . && ss -Huln sport = :" + udp +
                              " | grep -q .") == 0;
  };
  for (int i = 0; i < 100 && !(listening('s', "5001", "5353") && listening('s', "5001", "5356") &&
                               listening('s', "5001", "5357") && listening('c', "5002", "5355"));
       ++i)
    std::this_thread::sleep_for(100ms);
  // IPv6 neighbours resolved on every hop (an echo from wan to lan and back, which the policy
  // allows) before the first probe: a probe waits 2 s for its answer, and on a loaded CI
  // machine the Linux reference once spent longer than that resolving the client for a
  // 4000-byte answer's fragments (the IPv4 probes before it had resolved their hops by ARP).
  lab.exec('c', "ping -6 -c 1 -W 3 2001:db8:2::2 >/dev/null");
  const auto probe = [&](char side, const std::string& what) {
    std::string out = lab.exec_output(side, "python3 " + dir + "/probe.py " + what);
    while (!out.empty() && out.back() == '\n')
      out.pop_back();
    return out;
  };
  std::map<std::string, std::string> seen;
  seen["tcp wan->lan"] = probe('c', "tcp 198.51.100.2 5001");
  seen["tcp wan->lan, closed port"] = probe('c', "tcp 198.51.100.2 5003");
  seen["udp wan->lan"] = probe('c', "udp 198.51.100.2 5353");
  seen["udp wan->lan, closed port"] = probe('c', "udp 198.51.100.2 5354");
  seen["udp wan->lan, a 4000-byte answer (fragments)"] = probe('c', "udp 198.51.100.2 5356 4000");
  seen["udp6 wan->lan, a 4000-byte answer (fragments)"] = probe('c', "udp 2001:db8:2::2 5357 4000");
  seen["tcp lan->wan"] = probe('s', "tcp 192.0.2.2 5002");
  seen["udp lan->wan"] = probe('s', "udp 192.0.2.2 5355");
  seen["ping wan->lan"] =
      lab.exec('c', "ping -c 2 -i 0.2 -W 1 198.51.100.2 >/dev/null") == 0 ? "ok" : "lost";
  seen["ping lan->wan"] =
      lab.exec('s', "ping -c 2 -i 0.2 -W 1 192.0.2.2 >/dev/null") == 0 ? "ok" : "lost";
  sh("pkill -f " + dir + "/echo.py");
  return seen;
}

TEST_F(StatefulFirewall, HostsSeeWhatTheyWouldThroughLinuxConntrack) {
  see_what_linux_conntrack_shows();
}

// With flow offload on, established connections and replied flows are forwarded in XDP after
// their first packets: the hosts still see what they see through Linux.
class StatefulFirewallOffload : public StatefulFirewall {
 protected:
  std::string edit_config(std::string text) override {
    return StatefulFirewall::edit_config(std::move(text)) +
           "\noffload:\n    enabled: true\n    sweep_ms: 50\n";
  }
};

TEST_F(StatefulFirewallOffload, HostsSeeWhatTheyWouldThroughLinuxConntrack) {
  see_what_linux_conntrack_shows();
  const Json o = json("offload");
  EXPECT_EQ(o["summary"]["state"], "on") << o.dump();
  EXPECT_GT(o["summary"]["installed"].get<uint64_t>(), 0u) << o.dump();
}

// ---- a full table ----------------------------------------------------------------------------

class SynFlood : public StatefulFirewall {
 protected:
  static constexpr unsigned kMaxSessions = 64;
  std::string edit_config(std::string text) override {
    return std::regex_replace(
        StatefulFirewall::edit_config(std::move(text)), std::regex("    invalid: drop"),
        "    invalid: drop\n    max_sessions: " + std::to_string(kMaxSessions));
  }
};

TEST_F(SynFlood, FillsTheTableNewConnectionsAreRefusedAndCountedOpenOnesKeepWorking) {
  // A connection opened before the flood, used again after it.
  start_long_connection(0);
  // The flood: 2000 SYNs from 1000 source ports, far more openings than the table holds.
  const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
  ASSERT_EQ(lab_->exec('c', std::string(TRAFGEN_PATH) +
                                " send --dev eth0 --dst 198.51.100.2 --proto syn --dst-port 80 "
                                "--flows 1000 --count 2000 --rate 20000 --size 80 --dst-mac " +
                                wan_mac.substr(0, 17) + " > /dev/null"),
            0);
  // Full: a new connection gets nowhere.
  write_scripts(dir_);
  EXPECT_EQ(lab_->exec_output('c', "python3 " + dir_ + "/probe.py tcp 198.51.100.2 5009"),
            "timeout\n");
  EXPECT_EQ(end_long_connection(), "before after") << "the open connection broke";

  const Json sessions = json("sessions");
  uint64_t live = 0;
  for (const auto& r : sessions["summary"])
    if (r["state"] == "total") live = r["sessions"].get<uint64_t>();
  EXPECT_EQ(live, kMaxSessions) << sessions.dump();
  // Every SYN of a flow without a session was refused: all but the two of each flow that got
  // one of the sessions left.
  EXPECT_GE(dropped("ct_table_full"), 2000u - 2 * kMaxSessions);
  EXPECT_LE(dropped("ct_table_full"), 2000u);
  expect_exact(settled_accounting());
}

// A RST flood: resets spoofed into an open connection (its ports, sequence number 0: outside
// the window) and resets for connections that do not exist. Each is invalid and dropped by the
// firewall, none reaches the server, and the connection delivers all its bytes afterwards.
TEST_F(StatefulFirewall, RstFloodIsInvalidAndTheOpenConnectionSurvives) {
  constexpr int kClientPort = 40001;
  constexpr unsigned kIntoTheConnection = 1000, kStray = 1000;
  start_long_connection(kClientPort);
  const std::string wan_mac = lab_->exec_output('a', "cat /sys/class/net/wan0/address");
  const std::string send = fmt::format(
      "{} send --dev eth0 --dst 198.51.100.2 --proto rst --dst-port 5001 --rate 20000 --size 80 "
      "--dst-mac {}",
      TRAFGEN_PATH, wan_mac.substr(0, 17));
  ASSERT_EQ(lab_->exec('c', fmt::format("{} --src-port {} --flows 1 --count {} > /dev/null", send,
                                        kClientPort, kIntoTheConnection)),
            0);
  ASSERT_EQ(lab_->exec('c', fmt::format("{} --src-port 41000 --flows {} --count {} > /dev/null",
                                        send, kStray, kStray)),
            0);
  EXPECT_EQ(end_long_connection(), "before after") << "the connection was reset";

  // Every reset was invalid: dropped by the conntrack stage, never marked for the ACL.
  EXPECT_EQ(dropped("ct_invalid"), kIntoTheConnection + kStray);
  const Json tcp = json(fmt::format("sessions --port {}", kClientPort));
  ASSERT_EQ(tcp["matched"], 1) << tcp.dump();
  EXPECT_NE(tcp["session"]["state"], "close") << tcp.dump();
  expect_exact(settled_accounting());
}

}  // namespace
}  // namespace vecflow::test
