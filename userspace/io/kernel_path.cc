#include "io/kernel_path.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <rte_mbuf.h>

#include "core/log.h"

namespace vecflow {
namespace {

// Segments of one packet written with one writev; longer chains are refused (the caller drops
// them). Chains that long do not occur with a 2 KiB data room below 64 KiB frames.
constexpr unsigned kMaxSegments = 32;

// The one IPv4 address of every exception-path TAP (see create()).
constexpr const char* kTapAddress = "169.254.255.254";

bool write_sysctl(const std::string& path, const char* value) {
  std::ofstream f(path);
  if (!f) return false;
  f << value;
  return static_cast<bool>(f.flush());
}

}  // namespace

Result<std::unique_ptr<KernelPath>> KernelPath::create(const std::string& name, uint16_t queues,
                                                       const MacAddress& mac) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return fail("kernel path: TAP name '{}' must be 1..{} characters", name, IFNAMSIZ - 1);
  }
  if (queues == 0) return fail("kernel path: TAP '{}' needs at least one queue", name);
  if (if_nametoindex(name.c_str()) != 0) {
    return fail("kernel path: an interface named '{}' exists already", name);
  }
  auto kp = std::unique_ptr<KernelPath>(new KernelPath());
  kp->name_ = name;
  for (uint16_t q = 0; q < queues; ++q) {
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail("kernel path: cannot open /dev/net/tun: {}", strerror(errno));
    kp->fds_.push_back(fd);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE;
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
      return fail("kernel path: cannot create TAP '{}' queue {}: {}", name, q, strerror(errno));
    }
  }
  // Before the link comes up: no IPv6 link-local address, so the TAP sends nothing itself.
  write_sysctl("/proc/sys/net/ipv6/conf/" + name + "/addr_gen_mode", "1");
  if (!write_sysctl("/proc/sys/net/ipv4/conf/" + name + "/rp_filter", "2")) {
    return fail("kernel path: cannot set rp_filter of TAP '{}'", name);
  }
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail("kernel path: socket: {}", strerror(errno));
  // The reverse-path filter rejects every packet arriving on an interface without an IPv4
  // address, in loose mode too (and distributions turn it on for all interfaces). A /32 from
  // the link-local range gives the TAP one that routes nothing and is never a source address
  // for traffic leaving through other interfaces.
  ifreq addr{};
  std::strncpy(addr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<sockaddr_in*>(&addr.ifr_addr);
  sin->sin_family = AF_INET;
  inet_pton(AF_INET, kTapAddress, &sin->sin_addr);
  if (ioctl(s, SIOCSIFADDR, &addr) != 0) {
    int err = errno;
    close(s);
    return fail("kernel path: cannot give TAP '{}' its address {}: {}", name, kTapAddress,
                strerror(err));
  }
  inet_pton(AF_INET, "255.255.255.255", &sin->sin_addr);
  ioctl(s, SIOCSIFNETMASK, &addr);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  std::memcpy(ifr.ifr_hwaddr.sa_data, mac.bytes.data(), mac.bytes.size());
  bool zero_mac = mac == MacAddress{};
  int rc = zero_mac ? 0 : ioctl(s, SIOCSIFHWADDR, &ifr);
  int err = errno;
  if (rc == 0) {
    rc = ioctl(s, SIOCGIFFLAGS, &ifr);
    err = errno;
    ifr.ifr_flags |= IFF_UP;
    if (rc == 0) rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    err = errno;
  }
  close(s);
  if (rc < 0) return fail("kernel path: cannot set up TAP '{}': {}", name, strerror(err));
  log::get("io")->info("kernel path: TAP {} up ({} queue(s), mac {})", name, queues,
                       mac.to_string());
  return kp;
}

KernelPath::~KernelPath() {
  for (int fd : fds_)
    close(fd);
}

uint16_t KernelPath::send(uint16_t q, rte_mbuf** pkts, uint16_t n, uint64_t& bytes) noexcept {
  int fd = fds_[q];
  uint16_t sent = 0;
  for (; sent < n; ++sent) {
    rte_mbuf* m = pkts[sent];
    ssize_t rc;
    if (m->nb_segs == 1) {
      rc = write(fd, rte_pktmbuf_mtod(m, void*), m->data_len);
    } else {
      if (m->nb_segs > kMaxSegments) break;
      iovec iov[kMaxSegments];
      unsigned i = 0;
      for (rte_mbuf* s = m; s; s = s->next)
        iov[i++] = iovec{rte_pktmbuf_mtod(s, void*), s->data_len};
      rc = writev(fd, iov, static_cast<int>(i));
    }
    if (rc < 0) break;  // EAGAIN/ENOBUFS: the kernel's backlog is full; the caller drops
    bytes += m->pkt_len;
    rte_pktmbuf_free(m);
  }
  return sent;
}

}  // namespace vecflow
