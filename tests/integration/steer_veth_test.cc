// XdpSteering on real veth traffic in the lab's namespaces (tools/lab.sh): client -> wan0 of
// the appliance namespace, lan0 -> server. Rules by destination port decide: pass (the kernel
// answers ping and a TCP connect), drop, redirect (delivered into the server namespace, never
// leaving XDP) and userspace (an AF_XDP socket of the test receives the frames with correct
// metadata). The counters read back through the loader must equal what was sent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>

#include "core/parse.h"
#include "steer/steering.h"
#include "support/frame_builder.h"
#include "support/lab.h"
#include "support/raw_xsk.h"
#include "vecflow/xdp_meta.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint16_t kTcpPort = 7000, kDropPort = 9001, kRedirectPort = 9002, kLiftPort = 9003;
constexpr int kFrames = 20;  // per UDP flow

steer::SteerSetup lab_setup() {
  steer::SteerSetup s;
  s.ports = {{"wan", "wan0", config::XdpAttachMode::Auto}};
  s.interfaces = {{"wan", "wan0"}, {"lan", "lan0"}};
  s.steering.default_action = {config::SteerActionKind::Pass, {}};
  auto add = [&](uint8_t proto, std::optional<uint16_t> port, config::SteerAction a) {
    config::SteerRule r;
    r.name = "r" + std::to_string(s.steering.rules.size());
    r.match.l4_proto = proto;
    if (port) r.match.dst_port = config::PortRange{*port, *port};
    r.action = std::move(a);
    s.steering.rules.push_back(std::move(r));
  };
  add(1, std::nullopt, {config::SteerActionKind::Pass, {}});           // 0: ping
  add(6, kTcpPort, {config::SteerActionKind::Pass, {}});               // 1: tcp
  add(17, kDropPort, {config::SteerActionKind::Drop, {}});             // 2
  add(17, kRedirectPort, {config::SteerActionKind::Redirect, "lan"});  // 3
  add(17, kLiftPort, {config::SteerActionKind::Userspace, {}});        // 4
  return s;
}

// The XDP program id attached to an interface of a namespace, 0 if none.
uint32_t attached_prog(const Lab& lab, const std::string& ifname) {
  auto out = lab.exec_output('a', "ip -d link show " + ifname);
  auto at = out.find("prog/xdp id ");
  if (at == std::string::npos) return 0;
  return uint32_t(std::stoul(out.substr(at + 12)));
}

uint64_t rx_packets(const Lab& lab, char side, const std::string& ifname) {
  auto out = lab.exec_output(side, "cat /sys/class/net/" + ifname + "/statistics/rx_packets");
  return out.empty() ? 0 : std::stoull(out);
}

void send_udp(const std::string& client_ns, uint16_t port, int count) {
  NetnsScope in(client_ns);
  ASSERT_TRUE(in.ok());
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, "192.0.2.1", &to.sin_addr);
  char payload[32] = "vecflow steering test";
  for (int i = 0; i < count; ++i)
    ASSERT_EQ(sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              ssize_t(sizeof(payload)));
  close(fd);
}

}  // namespace

TEST(SteerVeth, RulesDecideRealTrafficAndCountersMatch) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());

  auto steering = steer::XdpSteering::start(lab_setup());
  ASSERT_TRUE(steering) << steering.error().message;
  auto& s = **steering;
  ASSERT_EQ(s.interfaces().size(), 1u);
  const auto& st = s.interfaces()[0];
  EXPECT_FALSE(st.generic);
  EXPECT_EQ(attached_prog(lab, "wan0"), st.prog_id) << "our program is the one on wan0";
  std::cout << "attached as " << (st.dispatcher ? "libxdp dispatcher" : "single program") << "\n";

  // The steering program redirects to this socket through its xsks_map.
  RawXsk xsk("wan0", 256);
  ASSERT_TRUE(xsk.ok() && xsk.fill());
  const uint32_t queue0 = 0;
  const int xsk_fd = xsk.fd();
  ASSERT_EQ(bpf_map_update_elem(s.xsks_map_fd("wan"), &queue0, &xsk_fd, BPF_ANY), 0);
  ASSERT_TRUE(xsk.ok());

  // pass: the kernel answers ping and accepts a TCP connection.
  EXPECT_EQ(lab.exec('c', "ping -c 3 -i 0.2 -W 1 192.0.2.1 >/dev/null"), 0);
  int listener = socket(AF_INET, SOCK_STREAM, 0);  // in the appliance namespace
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kTcpPort);
  inet_pton(AF_INET, "192.0.2.1", &addr.sin_addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  {
    NetnsScope in_c(lab.ns('c'));
    int c = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    close(c);
  }
  close(listener);

  uint64_t server_rx = rx_packets(lab, 's', "eth0");
  send_udp(lab.ns('c'), kDropPort, kFrames);
  send_udp(lab.ns('c'), kRedirectPort, kFrames);
  send_udp(lab.ns('c'), kLiftPort, kFrames);

  auto lifted = xsk.receive(kFrames);
  ASSERT_EQ(lifted.size(), size_t(kFrames));
  // Each with its metadata, where the kernel lets the program write it (bare otherwise).
  const bool with_meta = steer::kernel_allows_xdp_metadata();
  for (const auto& [meta, frame] : lifted) {
    ParsedFrame p;
    ASSERT_EQ(parse_frame(frame, p), std::nullopt);
    EXPECT_EQ(ntohs(p.key.dst_port), kLiftPort);
    if (!with_meta) {
      EXPECT_NE(meta.magic, VF_XDP_META_MAGIC);
      continue;
    }
    EXPECT_EQ(meta.magic, VF_XDP_META_MAGIC);
    EXPECT_EQ(meta.rule_id, 4u);
    EXPECT_EQ(meta.flow_hash, vf_flow_hash(&p.key, 1));
    EXPECT_EQ(meta.l2_len, 14);
    EXPECT_EQ(meta.l3_len, 20);
    EXPECT_EQ(meta.ip_version, 4);
    EXPECT_EQ(meta.l4_proto, 17);
  }
  // Redirected frames arrive in the server namespace (addressed to wan0's MAC, so its kernel
  // counts and discards them).
  EXPECT_GE(rx_packets(lab, 's', "eth0") - server_rx, uint64_t(kFrames))
      << lab.exec_output('a', "ip -s link show lan0; ethtool -S lan0")
      << lab.exec_output('s', "ip -s link show eth0; ethtool -S eth0");

  auto c = s.counters("wan");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->rules[0].packets, 3u) << "three echo requests";
  EXPECT_GE(c->rules[1].packets, 2u) << "SYN and the handshake's ACK";
  EXPECT_EQ(c->rules[2].packets, uint64_t(kFrames));
  EXPECT_EQ(c->rules[3].packets, uint64_t(kFrames));
  EXPECT_EQ(c->rules[4].packets, uint64_t(kFrames));
  EXPECT_EQ(c->drop[size_t(DropReason::STEER_RULE)], uint64_t(kFrames));
  EXPECT_EQ(c->verdict[VF_VERDICT_DROP], uint64_t(kFrames));
  EXPECT_EQ(c->verdict[VF_VERDICT_REDIRECT], uint64_t(kFrames));
  EXPECT_EQ(c->verdict[VF_VERDICT_USERSPACE], uint64_t(kFrames));
  EXPECT_EQ(c->no_socket_fallback, 0u);
  uint64_t verdicts = 0;
  for (auto v : c->verdict)
    verdicts += v;
  EXPECT_EQ(verdicts, c->rx_packets) << "every frame got exactly one verdict";
  EXPECT_EQ(c->verdict[VF_VERDICT_PASS],
            c->rules[0].packets + c->rules[1].packets + c->default_hits);

  // Replacing the rules while attached: the drop rule becomes a userspace rule.
  auto next = lab_setup().steering;
  next.rules[2].action = {config::SteerActionKind::Userspace, {}};
  ASSERT_TRUE(s.replace_rules(next));
  send_udp(lab.ns('c'), kDropPort, kFrames);
  EXPECT_EQ(xsk.receive(kFrames).size(), size_t(kFrames));
  auto after = s.counters("wan");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->rules[2].packets, uint64_t(kFrames)) << "per-rule counters restart with a set";
  EXPECT_EQ(after->verdict[VF_VERDICT_USERSPACE], uint64_t(2 * kFrames));
  EXPECT_EQ(after->verdict[VF_VERDICT_DROP], uint64_t(kFrames)) << "no new drops";

  s.stop();
  EXPECT_EQ(attached_prog(lab, "wan0"), 0u) << "detached on stop";
  EXPECT_EQ(lab.exec('c', "ping -c 1 -W 1 192.0.2.1 >/dev/null"), 0);
}

TEST(SteerVeth, RestartAfterACrashReplacesTheStaleProgram) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());

  // A child attaches and dies without detaching, as a crashed vecflowd would.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = steer::XdpSteering::start(lab_setup());
    _exit(s ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  uint32_t stale = attached_prog(lab, "wan0");
  ASSERT_NE(stale, 0u) << "the crashed run left its program attached";

  auto steering = steer::XdpSteering::start(lab_setup());
  ASSERT_TRUE(steering) << steering.error().message;
  uint32_t fresh = attached_prog(lab, "wan0");
  EXPECT_NE(fresh, stale);
  EXPECT_EQ(fresh, (*steering)->interfaces()[0].prog_id);
  auto ids = lab.exec_output('a', "ip -d link show wan0 | grep -o \"prog/xdp id [0-9]*\" | wc -l");
  EXPECT_EQ(std::stoi(ids), 1) << "never two programs";
  (*steering)->stop();
  EXPECT_EQ(attached_prog(lab, "wan0"), 0u);
}

TEST(SteerVeth, StartFailureNamesThePortAndLeavesNothingAttached) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());
  auto setup = lab_setup();
  setup.ports.push_back({"ghost", "vstnosuch0", config::XdpAttachMode::Auto});
  auto s = steer::XdpSteering::start(setup);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("port ghost"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("vstnosuch0"), std::string::npos) << s.error().message;
  EXPECT_EQ(attached_prog(lab, "wan0"), 0u) << "wan0 was attached first and must be detached";
}

TEST(SteerVeth, GenericModeWhenThePortAsksForIt) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());
  auto setup = lab_setup();
  setup.ports[0].mode = config::XdpAttachMode::Generic;
  auto s = steer::XdpSteering::start(setup);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE((*s)->interfaces()[0].generic);
  EXPECT_NE(lab.exec_output('a', "ip -d link show wan0").find("xdpgeneric"), std::string::npos);
}

// `xdp_mode: auto` on an interface whose driver has no native XDP (a bridge) attaches in
// generic mode and says so.
TEST(SteerVeth, AutoFallsBackToGenericWithoutNativeXdp) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  ASSERT_EQ(lab.exec('a', "ip link add vfbr0 type bridge && ip link set vfbr0 up"), 0);
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());
  steer::SteerSetup setup;
  setup.ports = {{"br", "vfbr0", config::XdpAttachMode::Auto}};
  setup.interfaces = {{"br", "vfbr0"}};
  auto s = steer::XdpSteering::start(setup);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE((*s)->interfaces()[0].generic);
  EXPECT_NE(lab.exec_output('a', "ip -d link show vfbr0").find("xdpgeneric"), std::string::npos);
  // Asked for native, the same interface is refused with the reason.
  (*s)->stop();
  setup.ports[0].mode = config::XdpAttachMode::Native;
  auto native = steer::XdpSteering::start(setup);
  ASSERT_FALSE(native);
  EXPECT_NE(native.error().message.find("native mode"), std::string::npos)
      << native.error().message;
}

// DPDK's net_af_xdp (`xdp_prog=`) loads and attaches the object itself; XdpSteering adopts
// that instance and its rules apply.
TEST(SteerVeth, AdoptsTheProgramDpdkAttaches) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  NetnsScope in_a(lab.ns('a'));
  ASSERT_TRUE(in_a.ok());
  auto setup = lab_setup();
  setup.ports[0].attach = false;
  auto steering = steer::XdpSteering::start(setup);
  ASSERT_TRUE(steering) << steering.error().message;
  auto& s = **steering;
  EXPECT_EQ(attached_prog(lab, "wan0"), 0u) << "left for DPDK to attach";

  // What DPDK 22.11 does with xdp_prog=PATH: load the file, attach unless a program is there.
  bpf_object* obj = bpf_object__open_file(steer::XdpSteering::bpf_object_path().c_str(), nullptr);
  ASSERT_NE(obj, nullptr);
  ASSERT_EQ(bpf_object__load(obj), 0);
  int prog = bpf_program__fd(bpf_object__find_program_by_name(obj, VF_STEER_PROG_NAME));
  int ifindex = int(if_nametoindex("wan0"));
  ASSERT_EQ(bpf_xdp_attach(ifindex, prog, XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr), 0);

  send_udp(lab.ns('c'), kDropPort, kFrames);  // not adopted yet: passed to the kernel
  ASSERT_TRUE(s.adopt("wan")) << "adopt";
  EXPECT_TRUE(s.interfaces()[0].adopted);
  send_udp(lab.ns('c'), kDropPort, kFrames);
  auto c = s.counters("wan");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_GE(c->unconfigured, uint64_t(kFrames));
  EXPECT_EQ(c->rules[2].packets, uint64_t(kFrames));
  EXPECT_EQ(c->drop[size_t(DropReason::STEER_RULE)], uint64_t(kFrames));
  EXPECT_GE(s.xsks_map_fd("wan"), 0) << "AF_XDP sockets of vecflow register in DPDK's instance";

  s.stop();
  EXPECT_NE(attached_prog(lab, "wan0"), 0u) << "DPDK's program stays until DPDK removes it";
  bpf_xdp_detach(ifindex, 0, nullptr);
  bpf_object__close(obj);
}

// vecflowd attaches steering on its afxdp ports at start and detaches on a clean stop; an
// interface that does not exist stops the start with an error naming the port.
TEST(SteerVeth, VecflowdAttachesAtStartAndDetachesOnStop) {
  VECFLOW_REQUIRE_NETNS();
  Lab lab(unique_name("vst"));
  ASSERT_TRUE(lab.ok());
  auto config_for = [&](const std::string& ifname) {
    std::string path = "/tmp/" + lab.name() + "-" + ifname + ".yaml";
    FILE* f = fopen(path.c_str(), "w");
    fprintf(f,
            "cpu: {control: 0, workers: [0]}\n"
            "dpdk: {memory_mb: 128, hugepages: off, file_prefix: %s-%s}\n"
            "ports:\n"
            "  - {name: wan, type: afxdp, interface: %s}\n"
            "steering:\n"
            "  default: pass\n"
            "  rules:\n"
            "    - {match: {proto: udp, dst_port: 9001}, action: drop}\n"
            "pipeline:\n"
            "  - {stage: route, routes: [{prefix: 192.0.2.0/24, port: wan}]}\n",
            lab.name().c_str(), ifname.c_str(), ifname.c_str());
    fclose(f);
    return path;
  };
  std::string good = config_for("wan0"), bad = config_for("vstnone0");
  std::string log = "/tmp/" + lab.name() + "-vecflowd.log";

  // A missing interface: vecflowd exits with an error that names the port.
  EXPECT_NE(lab.exec('a', std::string(VECFLOWD) + " -c " + bad + " >" + log + " 2>&1"), 0);
  auto out = sh_output("cat " + log);
  EXPECT_NE(out.find("port wan"), std::string::npos) << out;
  EXPECT_NE(out.find("vstnone0"), std::string::npos) << out;

  // A good file: attached while running (in a namespace without bpffs: it mounts one).
  lab.exec('a', std::string(VECFLOWD) + " -c " + good + " >" + log + " 2>&1 & echo $! > " + log +
                    ".pid");
  uint32_t prog = 0;
  for (int i = 0; i < 100 && prog == 0; ++i) {
    usleep(100 * 1000);
    prog = attached_prog(lab, "wan0");
  }
  EXPECT_NE(prog, 0u) << sh_output("cat " + log);
  EXPECT_EQ(lab.exec('c', "ping -c 1 -W 1 192.0.2.1 >/dev/null"), 0) << "default pass";
  sh("kill -TERM $(cat " + log + ".pid)");
  for (int i = 0; i < 100 && attached_prog(lab, "wan0") != 0; ++i)
    usleep(100 * 1000);
  EXPECT_EQ(attached_prog(lab, "wan0"), 0u) << "detached on a clean stop\n"
                                            << sh_output("cat " + log);
  sh("rm -f " + good + " " + bad + " " + log + " " + log + ".pid");
}
