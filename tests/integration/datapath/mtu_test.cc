// Packets larger than the egress link, through vecflowd and through Linux forwarding on the same
// lab (tools/lab.sh) with the lan link's MTU lowered to 1280: what the hosts see must be the
// same. IPv4 without DF arrives in fragments; IPv4 with DF and IPv6 are answered with ICMP
// fragmentation needed / packet too big carrying the MTU, from the ingress interface's
// address, so that the sender's kernel learns the path MTU; a TCP upload whose server
// advertises an MSS of 1460 completes by path MTU discovery. And vecflowd accounts for
// every packet: rx = tx + kernel + drops, the too-big ones under packet_too_big. The other
// errors a router sends by default, time exceeded and network unreachable, are compared too.
#include <fstream>
#include <map>
#include <regex>

#include "forwarding_fixture.h"

namespace vecflow::test {
namespace {

// The probes, as files. udp.py sends one datagram of `size` bytes: with `df` the socket does
// path MTU discovery (DF set; IPv6 routers never fragment anyway) and reports what the
// kernel learned; without, it waits for the server's echo of it. tcp.py uploads 4 MiB and
// reports the MSS the connection ended with.
void write_scripts(const std::string& dir) {
  std::ofstream(dir + "/udp.py")
      << "import socket, sys, time\n"
         "host, port, size, df = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "
         "sys.argv[4] == 'df'\n"
         "v6 = ':' in host\n"
         "s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)\n"
         "lvl, opt, mtu_opt = (41, 23, 24) if v6 else (0, 10, 14)  # *_MTU_DISCOVER, *_MTU\n"
         "s.setsockopt(lvl, opt, 2 if df else 0)  # IP_PMTUDISC_DO / _DONT\n"
         "s.settimeout(2)\n"
         "s.connect((host, port))\n"
         "s.send(b'x' * size)\n"
         "if df:\n"
         "    time.sleep(0.5)  # for the ICMP error to arrive\n"
         "    try:\n"
         "        s.send(b'x' * size)\n"
         "        print('sent, mtu', s.getsockopt(lvl, mtu_opt))\n"
         "    except OSError as e:\n"
         "        print('error', e.errno, 'mtu', s.getsockopt(lvl, mtu_opt))\n"
         "else:\n"
         "    try:\n"
         "        print('ok' if s.recv(65535) == b'x' * size else 'bad')\n"
         "    except socket.timeout:\n"
         "        print('timeout')\n";
  std::ofstream(dir + "/udp_echo.py")
      << "import socket\n"
         "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
         "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
         "s.bind(('::', 5400))\n"
         "s.settimeout(15)\n"
         "while True:\n"
         "    d, a = s.recvfrom(65535)\n"
         "    s.sendto(d, a)\n";
  std::ofstream(dir + "/tcp.py")
      << "import socket, sys\n"
         "host, size = sys.argv[1], 4 << 20\n"
         "try:\n"
         "    c = socket.create_connection((host, 5401), timeout=20)\n"
         "    c.sendall(b'y' * size)\n"
         "    c.shutdown(socket.SHUT_WR)\n"
         "    got = int(c.recv(100))\n"
         "    mss = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)\n"
         "    print('ok' if got == size else 'short %d' % got, 'mss', mss)\n"
         "except (socket.timeout, TimeoutError):\n"
         "    print('timeout')\n"
         "except OSError as e:\n"
         "    print('error', e.errno)\n";
  std::ofstream(dir + "/tcp_sink.py") << "import socket\n"
                                         "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
                                         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                                         "s.bind(('0.0.0.0', 5401))\n"
                                         "s.listen(1)\n"
                                         "s.settimeout(25)\n"
                                         "c, _ = s.accept()\n"
                                         "c.settimeout(20)\n"
                                         "n = 0\n"
                                         "while True:\n"
                                         "    d = c.recv(1 << 16)\n"
                                         "    if not d:\n"
                                         "        break\n"
                                         "    n += len(d)\n"
                                         "c.sendall(str(n).encode())\n"
                                         "c.close()\n";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

// What the client's ping shows: "ok", the ICMP error's line without its sequence number
// ("From 192.0.2.1 Frag needed and DF set (mtu = 1280)"), or "lost".
std::string ping(const Lab& lab, const std::string& args) {
  const std::string out = lab.exec_output('c', "ping -c 1 -W 2 " + args + " 2>&1; echo rc=$?");
  if (out.find("rc=0") != std::string::npos) return "ok";
  std::smatch m;
  if (std::regex_search(out, m, std::regex("From (\\S+) icmp_seq=\\d+ ([^\\n]+)")))
    return "From " + m[1].str() + " " + m[2].str();
  return "lost";
}

// Waits (up to 5 s) until `side` listens on `port` (udp or tcp).
void wait_listening(const Lab& lab, char side, const std::string& kind, int port) {
  const std::string cmd = "ss -H" + std::string(kind == "tcp" ? "t" : "u") +
                          "ln sport = :" + std::to_string(port) + " | grep -q .";
  for (int i = 0; i < 50 && lab.exec(side, cmd) != 0; ++i)
    std::this_thread::sleep_for(100ms);
}

// The lan link at 1280 on both ends: the hosts' own packets fit, the client's 1500-byte ones
// do not.
std::map<std::string, std::string> small_link_scenarios(const Lab& lab, const std::string& dir) {
  lab.exec('s', "timeout 15 python3 " + dir + "/udp_echo.py >/dev/null 2>&1 &");
  wait_listening(lab, 's', "udp", 5400);
  // Every neighbour resolved before the first probe (its answer waits 2 s at most).
  lab.exec('c',
           "ping -c 1 -W 3 198.51.100.2 >/dev/null; ping -6 -c 1 -W 3 2001:db8:2::2 >/dev/null");
  auto udp = [&](const std::string& args) {
    return trimmed(lab.exec_output('c', "python3 " + dir + "/udp.py " + args));
  };
  std::map<std::string, std::string> seen;
  // Before any answer teaches the client the path MTU (then it would fragment itself).
  seen["udp 1500 without DF, echoed"] = udp("198.51.100.2 5400 1472 nodf");
  seen["ping 1500 without DF"] = ping(lab, "-M dont -s 1472 198.51.100.2");
  seen["ping 1500 with DF"] = ping(lab, "-M do -s 1472 198.51.100.2");
  seen["ping 1280 with DF"] = ping(lab, "-M do -s 1252 198.51.100.2");
  seen["udp6 1500"] = udp("2001:db8:2::2 5400 1452 df");
  seen["udp6 1280, echoed"] = udp("2001:db8:2::2 5400 1232 nodf");
  seen["ping small"] = ping(lab, "198.51.100.2");
  // The other errors a router sends by default: time exceeded, and no route (the lab's
  // appliance routes only its two networks).
  seen["ping with TTL 1"] = ping(lab, "-t 1 198.51.100.2");
  seen["ping to a network without a route"] = ping(lab, "203.0.113.9");
  // A host the firewall rejects (vecflowd's ACL `reject`, nftables' reject with icmp
  // admin-prohibited): the sender learns it at once.
  seen["ping to a rejected host"] = ping(lab, "198.51.100.77");
  seen["udp6 to a rejected host"] = udp("2001:db8:2::77 5400 100 df");
  sh("pkill -f " + dir + "/udp_echo.py");
  return seen;
}

// The appliance's end of one link at 1280, the far host's at 1500 (so it advertises an MSS of
// 1460): an upload from the other host over that link only gets through once path MTU
// discovery has worked. `to_server`: client -> server, the lan link small (the too-big
// packets enter on wan, vecflowd's own AF_XDP queue); else server -> client, the wan link
// small (they enter on lan, a queue DPDK's net_af_xdp owns).
std::map<std::string, std::string> pmtud_scenarios(const Lab& lab, const std::string& dir,
                                                   bool to_server) {
  const char sink = to_server ? 's' : 'c', sender = to_server ? 'c' : 's';
  const std::string to = to_server ? "198.51.100.2" : "192.0.2.2";
  lab.exec(sink, "timeout 30 python3 " + dir + "/tcp_sink.py >/dev/null 2>&1 &");
  wait_listening(lab, sink, "tcp", 5401);
  lab.exec(sender, "ping -c 1 -W 3 " + to + " >/dev/null");
  std::map<std::string, std::string> seen;
  seen["tcp upload of 4 MiB"] =
      trimmed(lab.exec_output(sender, "python3 " + dir + "/tcp.py " + to));
  sh("pkill -f " + dir + "/tcp_sink.py");
  return seen;
}

class Mtu : public Forwarding {
 protected:
  std::string edit_config(std::string text) override {
    return std::regex_replace(
        with_ipv6(std::move(text)), std::regex("(      - \\{name: no-telnet[^\\n]*\\n)"),
        "$1      - {name: no-77, action: reject, dst: 198.51.100.77/32}\n"
        "      - {name: no-77-v6, action: reject, dst: \"2001:db8:2::77/128\"}\n");
  }
  void prepare_lab() override { set_link_mtu(*lab_); }
  virtual void set_link_mtu(const Lab& lab) {
    ASSERT_EQ(lab.exec('a', "ip link set lan0 mtu 1280"), 0);
    ASSERT_EQ(lab.exec('s', "ip link set eth0 mtu 1280"), 0);
  }

  // The Linux reference: a lab of its own, forwarding in the kernel, the same MTUs.
  std::unique_ptr<Lab> linux_lab() {
    auto lab = std::make_unique<Lab>(unique_name("vmk"));
    EXPECT_TRUE(lab->ok());
    EXPECT_EQ(lab->exec('a', "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1"), 0);
    // The firewall's rejects, as vecflowd's ACL has them (edit_config).
    std::ofstream(dir_ + "/reject.nft")
        << "table inet vf {\n"
           "  chain filter {\n"
           "    type filter hook forward priority 0;\n"
           "    ip daddr 198.51.100.77 reject with icmp admin-prohibited\n"
           "    ip6 daddr 2001:db8:2::77 reject with icmpv6 admin-prohibited\n"
           "  }\n"
           "}\n";
    EXPECT_EQ(lab->exec('a', "nft -f " + dir_ + "/reject.nft"), 0);
    set_link_mtu(*lab);
    return lab;
  }

  uint64_t route_counter(const std::string& name) {
    return json("routes")["stages"][0][name].get<uint64_t>();
  }
  uint64_t wan_drops(const std::string& reason) {
    uint64_t n = 0;
    const Json errors = json("errors");
    for (const auto& d : errors["by_port"])
      if (d["port"] == "wan" && d["reason"] == reason) n += d["count"].get<uint64_t>();
    return n;
  }
};

TEST_F(Mtu, TooBigPacketsGetWhatLinuxForwardingGives) {
  write_scripts(dir_);
  const auto linux_saw = small_link_scenarios(*linux_lab(), dir_);
  const auto vecflow_saw = small_link_scenarios(*lab_, dir_);
  EXPECT_EQ(vecflow_saw, linux_saw);
  // And the cases did what they are for.
  EXPECT_EQ(linux_saw.at("udp 1500 without DF, echoed"), "ok");
  EXPECT_EQ(linux_saw.at("ping 1500 with DF"),
            "From 192.0.2.1 Frag needed and DF set (mtu = 1280)");
  EXPECT_EQ(linux_saw.at("udp6 1500"), "error 90 mtu 1280");  // EMSGSIZE: the path MTU learned
  EXPECT_EQ(linux_saw.at("ping with TTL 1"), "From 192.0.2.1 Time to live exceeded");
  EXPECT_EQ(linux_saw.at("ping to a network without a route"),
            "From 192.0.2.1 Destination Net Unreachable");
  EXPECT_EQ(linux_saw.at("ping to a rejected host"), "From 192.0.2.1 Packet filtered");
  EXPECT_EQ(linux_saw.at("udp6 to a rejected host").substr(0, 8), "error 13");  // EACCES
  for (const auto& [what, saw] : vecflow_saw)
    RecordProperty(what, saw);

  // The counters settled (the control plane samples them once a second), then read.
  const Json accounting = settled_accounting();
  // The MTU in force, shown.
  EXPECT_EQ(json("ports --port lan")["ports"][0]["mtu"], 1280) << ctl("ports").out;
  EXPECT_EQ(route_counter("packet_too_big"), 2u);  // the DF ping, the first IPv6 datagram
  EXPECT_EQ(wan_drops("packet_too_big"), 2u);
  // The 1500-byte datagram and ping without DF, two fragments each.
  EXPECT_EQ(json("sched")["direct"][0]["fragments_out"], 4u) << ctl("sched").out;
  expect_exact(accounting);
}

// How many "Time to live exceeded" 20 TTL-1 pings, 10 ms apart, get back: Linux limits the
// errors to one destination (a burst, then one a second), and so does vecflowd.
int time_exceeded_in_a_burst(const Lab& lab) {
  lab.exec('c', "ping -c 1 -W 3 198.51.100.2 >/dev/null");
  const std::string out = lab.exec_output(
      'c', "ping -c 20 -i 0.01 -W 1 -t 1 198.51.100.2 2>&1 | grep -c \"Time to live exceeded\"");
  return std::atoi(out.c_str());
}

TEST_F(Mtu, IcmpErrorsAreLimitedPerDestinationAsLinuxLimitsThem) {
  const int on_linux = time_exceeded_in_a_burst(*linux_lab());
  const int through_vecflowd = time_exceeded_in_a_burst(*lab_);
  EXPECT_EQ(through_vecflowd, on_linux);
  RecordProperty("answered of 20", through_vecflowd);
  EXPECT_GT(on_linux, 0);
  EXPECT_LT(on_linux, 20);
  expect_exact(settled_accounting());
  EXPECT_EQ(wan_drops("icmp_limited"), uint64_t(20 - through_vecflowd));
}

// A steering rule that redirects in XDP what would not fit the egress link: the program asks
// bpf_check_mtu and lifts the frame to user space instead, which answers it as the route stage
// answers any other (a devmap redirect of it would fail after the program returned, uncounted).
class RedirectOverMtu : public Mtu {
 protected:
  std::string edit_config(std::string text) override {
    return std::regex_replace(
        Mtu::edit_config(std::move(text)), std::regex("\n  rules:\n"),
        "\n  rules:\n    - {name: fast, match: {port: wan, proto: icmp, dst: 198.51.100.0/24}, "
        "action: {redirect: lan}}\n");
  }
};

TEST_F(RedirectOverMtu, IsLiftedCountedAndAnswered) {
  EXPECT_EQ(ping(*lab_, "-M do -s 1472 198.51.100.2"),
            "From 192.0.2.1 Frag needed and DF set (mtu = 1280)");
  const Json accounting = settled_accounting();
  // The steering counters are sampled once a second, apart from the accounting.
  uint64_t lifted = 0;
  for (int i = 0; i < 30 && lifted == 0; ++i) {
    const Json steering = json("steering");
    for (const auto& p : steering["ports"])
      if (p["port"] == "wan") lifted = p["mtu_lifted"].get<uint64_t>();
    if (lifted == 0) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(lifted, 1u) << ctl("steering").out;
  EXPECT_EQ(route_counter("packet_too_big"), 1u);
  expect_exact(accounting);
}

// vecflowd sets the MTU of one port from the file (`ports[].mtu`); the Linux reference's is set
// by hand.
class PathMtuDiscovery : public Mtu, public ::testing::WithParamInterface<bool> {
 protected:
  bool to_server() const { return GetParam(); }
  std::string port() const { return to_server() ? "lan" : "wan"; }
  std::string device() const { return to_server() ? "lan0" : "wan0"; }
  std::string edit_config(std::string text) override {
    return std::regex_replace(Mtu::edit_config(std::move(text)),
                              std::regex("(  - name: " + port() + "\\n)"), "$1    mtu: 1280\n");
  }
  void prepare_lab() override {}
  void set_link_mtu(const Lab& lab) override {
    ASSERT_EQ(lab.exec('a', "ip link set " + device() + " mtu 1280"), 0);
  }
};

INSTANTIATE_TEST_SUITE_P(BothWays, PathMtuDiscovery, ::testing::Values(true, false),
                         [](const auto& info) {
                           return std::string(info.param ? "ClientToServer" : "ServerToClient");
                         });

TEST_P(PathMtuDiscovery, AnUploadPastASmallerLinkCompletes) {
  write_scripts(dir_);
  const auto linux_saw = pmtud_scenarios(*linux_lab(), dir_, to_server());
  const auto vecflow_saw = pmtud_scenarios(*lab_, dir_, to_server());
  EXPECT_EQ(vecflow_saw, linux_saw);
  // 1240 bytes of TCP header and payload in a 1280-byte packet, less the timestamp option.
  EXPECT_EQ(linux_saw.at("tcp upload of 4 MiB"), "ok mss 1228");
  EXPECT_EQ(trimmed(lab_->exec_output('a', "cat /sys/class/net/" + device() + "/mtu")), "1280");
  expect_exact(settled_accounting());
  EXPECT_GE(route_counter("packet_too_big"), 1u);
}

// Jumbo frames: every link of the lab at MTU 9000, the appliance's ends set from the file, both
// ports on vecflowd's own AF_XDP sockets (multi-buffer: a 9000-byte frame spans five 2048-byte
// buffers on the way in and out).
std::map<std::string, std::string> jumbo_scenarios(const Lab& lab, const std::string& dir) {
  lab.exec('s', "timeout 25 python3 " + dir + "/udp_echo.py >/dev/null 2>&1 &");
  lab.exec('s', "timeout 30 python3 " + dir + "/tcp_sink.py >/dev/null 2>&1 &");
  wait_listening(lab, 's', "udp", 5400);
  wait_listening(lab, 's', "tcp", 5401);
  lab.exec('c',
           "ping -c 1 -W 3 198.51.100.2 >/dev/null; ping -6 -c 1 -W 3 2001:db8:2::2 >/dev/null");
  auto udp = [&](const std::string& args) {
    return trimmed(lab.exec_output('c', "python3 " + dir + "/udp.py " + args));
  };
  std::map<std::string, std::string> seen;
  seen["udp 8000, echoed"] = udp("198.51.100.2 5400 8000 nodf");
  seen["udp6 8000, echoed"] = udp("2001:db8:2::2 5400 8000 nodf");
  seen["ping 9000 with DF"] = ping(lab, "-M do -s 8972 198.51.100.2");
  seen["tcp upload of 4 MiB"] =
      trimmed(lab.exec_output('c', "python3 " + dir + "/tcp.py " + "198.51.100.2"));
  sh("pkill -f " + dir + "/udp_echo.py; pkill -f " + dir + "/tcp_sink.py");
  return seen;
}

class Jumbo : public Mtu {
 protected:
  std::string edit_config(std::string text) override {
    text = Mtu::edit_config(std::move(text));
    // lan on vecflowd's own socket: DPDK's net_af_xdp takes a frame in one buffer.
    text = std::regex_replace(
        text, std::regex(R"(    queues:\n      - \{queues: 0, owner: dpdk\})"), "    queues: 1");
    return std::regex_replace(text, std::regex("(  - name: (wan|lan)\n)"), "$1    mtu: 9000\n");
  }
  void prepare_lab() override { set_host_mtu(*lab_); }
  void set_link_mtu(const Lab& lab) override {
    set_host_mtu(lab);
    ASSERT_EQ(lab.exec('a', "ip link set wan0 mtu 9000 && ip link set lan0 mtu 9000"), 0);
  }
  static void set_host_mtu(const Lab& lab) {
    ASSERT_EQ(lab.exec('c', "ip link set eth0 mtu 9000"), 0);
    ASSERT_EQ(lab.exec('s', "ip link set eth0 mtu 9000"), 0);
  }
};

TEST_F(Jumbo, NineThousandByteFramesForwardWhole) {
  write_scripts(dir_);
  const auto linux_saw = jumbo_scenarios(*linux_lab(), dir_);
  const auto vecflow_saw = jumbo_scenarios(*lab_, dir_);
  EXPECT_EQ(vecflow_saw, linux_saw);
  EXPECT_EQ(linux_saw.at("udp 8000, echoed"), "ok");
  EXPECT_EQ(linux_saw.at("ping 9000 with DF"), "ok");
  // 9000 less the IP and TCP headers and the timestamp option.
  EXPECT_EQ(linux_saw.at("tcp upload of 4 MiB"), "ok mss 8948");
  for (const auto& [what, saw] : vecflow_saw)
    RecordProperty(what, saw);

  const Json accounting = settled_accounting();
  EXPECT_EQ(json("ports --port lan")["ports"][0]["mtu"], 9000) << ctl("ports").out;
  // Whole: nothing cut or refused on the way.
  EXPECT_EQ(json("sched")["direct"][0]["fragments_out"], 0u) << ctl("sched").out;
  EXPECT_EQ(route_counter("packet_too_big"), 0u);
  expect_exact(accounting);
}

}  // namespace
}  // namespace vecflow::test
