#include "io_fixtures.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include "io_meta_redirect.skel.h"
#include "support/eal_env.h"

namespace vecflow::test {

PacketPool& test_pool() {
  static std::unique_ptr<PacketPool> pool = [] {
    const std::string& why = init_eal();
    if (!why.empty()) {
      fprintf(stderr, "EAL did not start: %s\n", why.c_str());
      std::abort();
    }
    PacketPoolOptions o;
    o.name = "vpo_test_pool";
    auto p = PacketPool::create(o);
    if (!p) {
      fprintf(stderr, "%s\n", p.error().message.c_str());
      std::abort();
    }
    return std::move(*p);
  }();
  return *pool;
}

VethLab::VethLab(int queues) : ns_(unique_name("vpo")) {
  std::string q = std::to_string(queues);
  ok_ = sh("ip netns add " + ns_) == 0 &&
        run("ip link add " + std::string(a) + " numrxqueues " + q + " numtxqueues " + q +
            " type veth peer name " + b + " numrxqueues " + q + " numtxqueues " + q) == 0 &&
        // IPv6 off before the links come up: the kernel's MLD reports and router
        // solicitations would otherwise reach the sockets among the test's own frames.
        run("sysctl -qw net.ipv6.conf." + std::string(a) + ".disable_ipv6=1 net.ipv6.conf." + b +
            ".disable_ipv6=1 && ip link set lo up && ip link set " + std::string(a) +
            " up && ip link set " + b + " up") == 0;
  run("ethtool -K " + std::string(a) + " gro on >/dev/null 2>&1; ethtool -K " + b +
      " gro on >/dev/null 2>&1; true");
}

VethLab::~VethLab() {
  sh("ip netns del " + ns_ + " 2>/dev/null");
}

int VethLab::run(const std::string& command) const {
  return sh("ip netns exec " + ns_ + " sh -c '" + command + "'");
}

RawSocket::RawSocket(const std::string& ifname) {
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd_ < 0) return;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  int one = 1;
  if (sll.sll_ifindex == 0 || bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0 ||
      setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

RawSocket::~RawSocket() {
  if (fd_ >= 0) close(fd_);
}

bool RawSocket::send(const Bytes& frame) {
  return ::send(fd_, frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size());
}

std::optional<Bytes> RawSocket::recv(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
  Bytes b(65536);
  ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
  if (n < 0) return std::nullopt;
  b.resize(static_cast<size_t>(n));
  return b;
}

std::vector<Bytes> RawSocket::recv_n(size_t count, int timeout_ms) {
  std::vector<Bytes> out;
  while (out.size() < count) {
    auto f = recv(timeout_ms);
    if (!f) break;
    out.push_back(std::move(*f));
  }
  return out;
}

TestXdp::TestXdp(int ifindex, Kind kind) : ifindex_(ifindex) {
  if (kind == Kind::LibxdpDefault) {
    int fd = -1;
    int rc = xsk_setup_xdp_prog(ifindex, &fd);
    if (rc != 0) {
      error_ = std::string("xsk_setup_xdp_prog: ") + strerror(-rc);
      return;
    }
    map_fd_ = fd;
    return;
  }
  auto* skel = io_meta_redirect_bpf__open_and_load();
  if (!skel) {
    error_ = std::string("loading meta_redirect.bpf.o: ") + strerror(errno);
    return;
  }
  skel_ = skel;
  int rc = bpf_xdp_attach(ifindex, bpf_program__fd(skel->progs.meta_redirect), 0, nullptr);
  if (rc != 0) {
    error_ = std::string("attaching meta_redirect: ") + strerror(-rc);
    return;
  }
  map_fd_ = bpf_map__fd(skel->maps.xsks_map);
}

void TestXdp::detach() {
  if (map_fd_ >= 0 || skel_) bpf_xdp_detach(ifindex_, 0, nullptr);
  if (skel_) {
    io_meta_redirect_bpf__destroy(static_cast<io_meta_redirect_bpf*>(skel_));
    skel_ = nullptr;
  } else if (map_fd_ >= 0) {
    close(map_fd_);
  }
  map_fd_ = -1;
}

TestXdp::~TestXdp() {
  detach();
}

uint32_t attached_xdp_prog(int ifindex) {
  uint32_t id = 0;
  bpf_xdp_query_id(ifindex, 0, &id);
  return id;
}

Bytes udp_frame(uint16_t sport, uint16_t dport, size_t payload) {
  return FrameBuilder()
      .ipv4(ip4(192, 0, 2, 2), ip4(198, 51, 100, 2), 17)
      .udp(sport, dport)
      .payload(payload, static_cast<uint8_t>(sport))
      .build();
}

Bytes mbuf_bytes(const rte_mbuf* m) {
  Bytes b;
  for (const rte_mbuf* s = m; s; s = s->next) {
    const uint8_t* p = rte_pktmbuf_mtod(s, const uint8_t*);
    b.insert(b.end(), p, p + s->data_len);
  }
  return b;
}

rte_mbuf* mbuf_of(PacketPool& pool, const Bytes& frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool.mempool());
  if (!m) return nullptr;
  char* p = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
  std::memcpy(p, frame.data(), frame.size());
  return m;
}

Background::Background(const std::string& command) {
  std::string line = "exec " + command;
  const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) ==
      0) {
    pid_ = pid;
  }
}

Background::~Background() {
  stop();
}

int Background::stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string built_tool(const std::string& name) {
  if (name == "trafgen") return VPO_TRAFGEN;
  if (name == "virtio_peer") return VPO_VIRTIO_PEER;
  return name;
}

}  // namespace vecflow::test
