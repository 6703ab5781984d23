#include "io/dpdk/dpdk_port.h"

#include <linux/virtio_config.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_vhost.h>

#include "core/log.h"
#include "io/packet_pool.h"

namespace vecflow {
namespace {

// The value of `key=` in a devargs string, or empty.
std::string devarg(const std::string& devargs, std::string_view key) {
  std::string needle = "," + std::string(key) + "=";
  size_t pos = devargs.find(needle);
  if (pos == std::string::npos) return {};
  pos += needle.size();
  size_t end = devargs.find(',', pos);
  return devargs.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

// A vhost-user socket path that something already listens on, or a file left behind: DPDK
// would fail to bind it with a bare "Address already in use". Says which of the two it is.
Result<void> check_vhost_socket(const std::string& path) {
  if (path.empty()) return {};
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) {
    return fail("vhost-user socket path {} is taken by a file that is not a socket", path);
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  bool live = s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  if (s >= 0) close(s);
  if (live) return fail("vhost-user socket {} is taken: another process listens on it", path);
  return fail(
      "vhost-user socket {} exists but nobody listens on it (left by a process that "
      "stopped?): remove the file",
      path);
}

// "packed" or "split": the virtqueue layout the guest on `socket` negotiated, or "no guest".
// The vhost library names each connection (vid) by its socket path.
std::string vhost_ring_layout(const std::string& socket) {
  constexpr int kMaxVhostDevices = 1024;  // RTE_MAX_VHOST_DEVICE of DPDK 22.11
  char name[PATH_MAX];
  for (int vid = 0; vid < kMaxVhostDevices; ++vid) {
    if (rte_vhost_get_ifname(vid, name, sizeof(name)) != 0 || socket != name) continue;
    uint64_t features = 0;
    if (rte_vhost_get_negotiated_features(vid, &features) != 0) continue;
    return features & (1ULL << VIRTIO_F_RING_PACKED) ? "packed" : "split";
  }
  return "no guest";
}

bool is_eventfd(int fd) {
  char link[64];
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  return std::strstr(link, "eventfd") != nullptr;
}

}  // namespace

Result<std::unique_ptr<DpdkPort>> DpdkPort::create(std::string name, PortId id,
                                                   const DpdkOptions& o, PacketPool& pool) {
  if (o.devargs.rfind("net_vhost", 0) == 0) {
    if (auto r = check_vhost_socket(devarg(o.devargs, "iface")); !r) {
      return fail("port {}: {}", name, r.error().message);
    }
  }
  auto port = std::unique_ptr<DpdkPort>(new DpdkPort(name, id));
  auto dev = EthDevice::probe(o.devargs);
  if (!dev) return fail("port {}: {}", name, dev.error().message);
  port->dev_ = std::move(*dev);
  EthQueueConfig c;
  c.queues = o.queues;
  c.rx_descriptors = o.rx_descriptors;
  c.tx_descriptors = o.tx_descriptors;
  c.pool = pool.mempool();
  c.rss = o.classify.flow_id != FlowIdSource::Software;
  c.rx_interrupts = o.rx_interrupts;
  c.mtu = o.mtu;
  if (!o.interface.empty() && c.mtu == 0) c.mtu = interface_mtu(o.interface);
  if (auto r = port->dev_.configure(c); !r) return fail("port {}: {}", name, r.error().message);
  // On the kernel interface where the device has one (net_tap's ethdev caps its MTU at 1500 and
  // receives larger frames all the same, into chains); else on the ethdev.
  if (o.mtu != 0 && !o.interface.empty()) {
    if (auto r = set_interface_mtu(o.interface, o.mtu); !r)
      return fail("port {}: {}", name, r.error().message);
  } else if (o.mtu != 0) {
    const int rc = rte_eth_dev_set_mtu(port->dev_.port(), static_cast<uint16_t>(o.mtu));
    if (rc == -ENOTSUP) {
      // A device without an MTU of its own (net_vhost: the guest sizes its frames, and any
      // size crosses): the file's MTU is the port's, for the route stage and the tx adapter.
      port->own_mtu_ = o.mtu;
    } else if (rc != 0) {
      return fail("port {}: cannot set MTU {}: {}", name, o.mtu, rte_strerror(-rc));
    }
  }
  port->queues_ = o.queues;
  port->classify_ = o.classify;
  port->classify_.port = id;
  port->interface_ = o.interface;
  port->try_meta_ = o.devargs.rfind("net_af_xdp", 0) == 0;
  if (o.devargs.rfind("net_vhost", 0) == 0) port->vhost_socket_ = devarg(o.devargs, "iface");
  port->wake_ = std::make_unique<Wake[]>(o.queues);
  port->size_counters(o.queues, o.queues);
  log::get("io")->info("port {}: DPDK {} (ethdev {}), {} queue(s), flow id from {}{}", name,
                       port->dev_.name(), port->dev_.port(), o.queues,
                       port->dev_.rss_hash() && c.rss ? "the device's RSS hash" : "software",
                       port->dev_.rx_interrupts() ? ", rx interrupts" : "");
  return port;
}

DpdkPort::~DpdkPort() {
  stop();
}

Result<void> DpdkPort::start() {
  if (auto r = dev_.start(); !r) return fail("port {}: {}", name(), r.error().message);
  return {};
}

void DpdkPort::stop() noexcept {
  for (uint16_t q = 0; q < queues_; ++q) {
    Wake& w = wake_[q];
    if (w.armed) disarm_wakeup(q);
    rte_pktmbuf_free_bulk(w.stash, w.stashed);
    w.stashed = 0;
  }
  dev_.stop();
}

uint16_t DpdkPort::rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  uint16_t got;
  Wake& w = wake_[q];
  if (unlikely(w.stashed != 0)) {
    got = std::min(w.stashed, n);
    std::copy_n(w.stash, got, pkts);
    std::copy(w.stash + got, w.stash + w.stashed, w.stash);
    w.stashed = static_cast<uint16_t>(w.stashed - got);
  } else {
    got = rte_eth_rx_burst(dev_.port(), q, pkts, n);
    if (got == 0) return 0;
  }
  RxQueueCounters& c = rx_counter(q);
  uint64_t bytes;
  const uint16_t kept = classify_burst(pkts, got, classify_, try_meta_, c.drops, bytes);
  c.packets.add(kept);
  c.bytes.add(bytes);
  return kept;
}

uint16_t DpdkPort::tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  // Lengths are read before the call: the PMD may free what it takes at once, and another
  // lcore may then reuse those buffers.
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i)
    bytes += pkts[i]->pkt_len;
  uint16_t sent = rte_eth_tx_burst(dev_.port(), q, pkts, n);
  for (uint16_t i = sent; i < n; ++i)
    bytes -= pkts[i]->pkt_len;
  TxQueueCounters& c = tx_counter(q);
  c.packets.add(sent);
  c.bytes.add(bytes);
  c.refused.add(n - sent);
  return sent;
}

int DpdkPort::arm_wakeup(uint16_t q) noexcept {
  if (!dev_.rx_interrupts()) return -1;
  uint16_t p = dev_.port();
  // -ENOTSUP: the PMD has nothing to switch on (net_tap: its queue descriptor is readable
  // whenever a frame waits), the descriptor alone is the interrupt.
  if (int rc = rte_eth_dev_rx_intr_enable(p, q); rc != 0 && rc != -ENOTSUP) return -1;
  int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(p, q);
  Wake& w = wake_[q];
  // Frames that arrived before the interrupt was enabled raise none: look once more.
  if (fd >= 0 && w.stashed == 0) w.stashed = rte_eth_rx_burst(p, q, w.stash, kStash);
  if (fd < 0 || w.stashed != 0) {
    rte_eth_dev_rx_intr_disable(p, q);
    return -1;
  }
  if (fd != w.fd) {
    w.fd = fd;
    w.eventfd = is_eventfd(fd);  // a syscall only when the descriptor changes (vhost reconnect)
  }
  w.armed = true;
  RxQueueCounters& c = rx_counter(q);
  c.sleeps.add();
  c.sleeping.store(true, std::memory_order_relaxed);
  return fd;
}

void DpdkPort::disarm_wakeup(uint16_t q) noexcept {
  Wake& w = wake_[q];
  if (!w.armed) return;
  w.armed = false;
  rte_eth_dev_rx_intr_disable(dev_.port(), q);
  if (w.eventfd) {
    pollfd pfd{w.fd, POLLIN, 0};
    uint64_t v;
    if (poll(&pfd, 1, 0) > 0) {
      ssize_t r = read(w.fd, &v, sizeof(v));
      (void)r;  // EAGAIN: another reader emptied it first, which is all we wanted
    }
  }
  rx_counter(q).sleeping.store(false, std::memory_order_relaxed);
}

void DpdkPort::set_flow_hash(bool needed, const FlowHashRewrite* rewrite) noexcept {
  classify_.hash = needed;
  classify_.rewrite = rewrite;
}

void DpdkPort::set_vlans(const VlanDemux* demux) noexcept {
  Port::set_vlans(demux);
  __atomic_store_n(&classify_.vlans, demux, __ATOMIC_RELEASE);
}

PortHardware DpdkPort::hardware() const {
  PortHardware h = ethdev_hardware(dev_.port());
  h.mtu = device_mtu();
  return h;
}

uint32_t DpdkPort::device_mtu() const {
  if (own_mtu_ != 0) return own_mtu_;
  return interface_.empty() ? ethdev_mtu(dev_.port()) : interface_mtu(interface_);
}

PortStatus DpdkPort::status() const {
  PortStatus s = base_status();
  s.device = dev_.name();
  for (auto& qs : s.queues) {
    qs.served_by = dev_.name();
    qs.copy = CopyMode::ZeroCopy;
    qs.can_sleep = dev_.rx_interrupts();
  }
  s.device_drops = dev_.drops();
  s.device_stats = dev_.xstats();
  if (!vhost_socket_.empty()) {
    s.device_info.emplace_back("vhost.socket", vhost_socket_);
    s.device_info.emplace_back("vhost.ring", vhost_ring_layout(vhost_socket_));
  }
  return s;
}

}  // namespace vecflow
