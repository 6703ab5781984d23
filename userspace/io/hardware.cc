#include "io/hardware.h"

#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_ethdev.h>

namespace vecflow {
namespace {

// One ethtool request on `ifname` through an AF_INET socket; false if the driver refuses it.
bool ethtool(int fd, const std::string& ifname, void* cmd) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = static_cast<char*>(cmd);
  return ioctl(fd, SIOCETHTOOL, &ifr) == 0;
}

// A sysfs attribute of the interface as a number, or `fallback` when it has none (a veth has
// no NUMA node; a link that is down has no speed).
long sysfs_number(const std::string& ifname, const std::string& attribute, long fallback) {
  std::ifstream f("/sys/class/net/" + ifname + "/" + attribute);
  long v;
  return f >> v ? v : fallback;
}

}  // namespace

PortHardware interface_hardware(const std::string& ifname) {
  PortHardware h;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    if (ethtool(fd, ifname, &info)) {
      h.driver = info.driver;
      h.bus = info.bus_info;
    }
    ethtool_channels ch{};
    ch.cmd = ETHTOOL_GCHANNELS;
    if (ethtool(fd, ifname, &ch)) {
      // Drivers count their queues as combined channels or as separate rx and tx ones.
      h.rx_queues = static_cast<uint16_t>(ch.combined_count + ch.rx_count);
      h.tx_queues = static_cast<uint16_t>(ch.combined_count + ch.tx_count);
      h.rx_queues_max = static_cast<uint16_t>(ch.max_combined + ch.max_rx);
      h.tx_queues_max = static_cast<uint16_t>(ch.max_combined + ch.max_tx);
    }
    // The offloads that matter to a forwarder, each asked the classic way: every driver
    // answers these, where the feature-string interface differs between kernels.
    const std::pair<uint32_t, const char*> offloads[] = {{ETHTOOL_GRXCSUM, "rx-checksum"},
                                                         {ETHTOOL_GTXCSUM, "tx-checksum"},
                                                         {ETHTOOL_GSG, "scatter-gather"},
                                                         {ETHTOOL_GTSO, "tso"},
                                                         {ETHTOOL_GGSO, "gso"},
                                                         {ETHTOOL_GGRO, "gro"}};
    for (const auto& [cmd, name] : offloads) {
      ethtool_value v{};
      v.cmd = cmd;
      if (ethtool(fd, ifname, &v) && v.data) h.offloads.emplace_back(name);
    }
    close(fd);
  }
  if (h.rx_queues == 0) {
    // No channel interface: count the queues sysfs lists.
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator("/sys/class/net/" + ifname + "/queues", ec)) {
      const std::string n = e.path().filename();
      if (n.starts_with("rx-")) ++h.rx_queues;
      if (n.starts_with("tx-")) ++h.tx_queues;
    }
  }
  h.numa_node = static_cast<int>(sysfs_number(ifname, "device/numa_node", -1));
  const long speed = sysfs_number(ifname, "speed", 0);
  h.speed_mbps = speed > 0 ? static_cast<uint32_t>(speed) : 0;
  h.mtu = interface_mtu(ifname);

  const unsigned ifindex = if_nametoindex(ifname.c_str());
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  if (ifindex != 0 && bpf_xdp_query(static_cast<int>(ifindex), 0, &q) == 0) {
    switch (q.attach_mode) {
      case XDP_ATTACHED_DRV:
        h.xdp_mode = "native";
        break;
      case XDP_ATTACHED_SKB:
        h.xdp_mode = "generic";
        break;
      case XDP_ATTACHED_HW:
        h.xdp_mode = "offload";
        break;
      case XDP_ATTACHED_MULTI:
        h.xdp_mode = "several";
        break;
      default:
        break;
    }
    h.xdp_program_id = q.prog_id ? q.prog_id : q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id;
    if (h.xdp_program_id) {
      const int pfd = bpf_prog_get_fd_by_id(h.xdp_program_id);
      if (pfd >= 0) {
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(pfd, &info, &len) == 0) h.xdp_program = info.name;
        close(pfd);
      }
    }
  }
  return h;
}

PortHardware ethdev_hardware(uint16_t port_id) {
  PortHardware h;
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_id, &info) == 0) {
    h.driver = info.driver_name ? info.driver_name : "";
    if (info.device) {
      const rte_bus* bus = rte_dev_bus(info.device);
      const std::string bus_name = bus ? rte_bus_name(bus) : "";
      h.bus = bus_name == "pci" ? rte_dev_name(info.device) : bus_name;
    }
    h.rx_queues = info.nb_rx_queues;
    h.tx_queues = info.nb_tx_queues;
    h.rx_queues_max = info.max_rx_queues;
    h.tx_queues_max = info.max_tx_queues;
  }
  h.numa_node = rte_eth_dev_socket_id(port_id);
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_id, &link) == 0 && link.link_speed != RTE_ETH_SPEED_NUM_NONE &&
      link.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN)
    h.speed_mbps = link.link_speed;
  h.mtu = ethdev_mtu(port_id);
  rte_eth_conf conf{};
  if (rte_eth_dev_conf_get(port_id, &conf) == 0) {
    for (uint64_t bits = conf.rxmode.offloads; bits; bits &= bits - 1)
      h.offloads.emplace_back(std::string("rx-") +
                              rte_eth_dev_rx_offload_name(uint64_t{1} << std::countr_zero(bits)));
    for (uint64_t bits = conf.txmode.offloads; bits; bits &= bits - 1)
      h.offloads.emplace_back(std::string("tx-") +
                              rte_eth_dev_tx_offload_name(uint64_t{1} << std::countr_zero(bits)));
  }
  return h;
}

uint32_t interface_mtu(const std::string& ifname) {
  // SIOCGIFMTU rather than sysfs: it answers for the calling thread's network namespace, which
  // /sys/class/net does only where sysfs was mounted in it (`ip netns exec` does, setns not).
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  const int rc = ioctl(fd, SIOCGIFMTU, &ifr);
  close(fd);
  return rc == 0 ? static_cast<uint32_t>(ifr.ifr_mtu) : 0;
}

uint32_t ethdev_mtu(uint16_t port_id) {
  uint16_t mtu = 0;
  return rte_eth_dev_get_mtu(port_id, &mtu) == 0 ? mtu : 0;
}

Result<void> set_interface_mtu(const std::string& ifname, uint32_t mtu) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("{}: MTU {}: no socket: {}", ifname, mtu, std::strerror(errno));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_mtu = static_cast<int>(mtu);
  const int rc = ioctl(fd, SIOCSIFMTU, &ifr);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return fail("{}: cannot set MTU {} ({}; the device's limits: `ip -d link show {}`)", ifname,
                mtu, std::strerror(err), ifname);
  }
  return {};
}

namespace {

// The kernel's feature names of an interface (ETH_SS_FEATURES), by bit.
std::vector<std::string> feature_names(int fd, const std::string& ifname) {
  // The header and the one count it asks for (ethtool_sset_info ends in a flexible array).
  alignas(ethtool_sset_info) uint8_t info_buf[sizeof(ethtool_sset_info) + sizeof(uint32_t)] = {};
  auto* info = reinterpret_cast<ethtool_sset_info*>(info_buf);
  info->cmd = ETHTOOL_GSSET_INFO;
  info->sset_mask = uint64_t{1} << ETH_SS_FEATURES;
  if (!ethtool(fd, ifname, info) || !(info->sset_mask & (uint64_t{1} << ETH_SS_FEATURES)))
    return {};
  const uint32_t count = info->data[0];
  std::vector<uint8_t> buf(sizeof(ethtool_gstrings) + size_t{count} * ETH_GSTRING_LEN);
  auto* strings = reinterpret_cast<ethtool_gstrings*>(buf.data());
  strings->cmd = ETHTOOL_GSTRINGS;
  strings->string_set = ETH_SS_FEATURES;
  strings->len = count;
  if (!ethtool(fd, ifname, strings)) return {};
  std::vector<std::string> out;
  for (uint32_t i = 0; i < strings->len; ++i) {
    const char* name = reinterpret_cast<const char*>(strings->data) + size_t{i} * ETH_GSTRING_LEN;
    out.emplace_back(name, strnlen(name, ETH_GSTRING_LEN));
  }
  return out;
}

// Turns the features at `bits` of `ifname` on or off; the bits whose active state then is as
// asked.
Result<std::vector<size_t>> set_features(int fd, const std::string& ifname, size_t count,
                                         const std::vector<size_t>& bits, bool on) {
  const size_t n = (count + 31) / 32;  // 32 features a block
  std::vector<uint8_t> gbuf(sizeof(ethtool_gfeatures) + n * sizeof(ethtool_get_features_block));
  auto* g = reinterpret_cast<ethtool_gfeatures*>(gbuf.data());
  g->cmd = ETHTOOL_GFEATURES;
  g->size = static_cast<uint32_t>(n);
  if (!ethtool(fd, ifname, g))
    return fail("{}: cannot read its features: {}", ifname, std::strerror(errno));
  std::vector<uint8_t> sbuf(sizeof(ethtool_sfeatures) + n * sizeof(ethtool_set_features_block));
  auto* sf = reinterpret_cast<ethtool_sfeatures*>(sbuf.data());
  sf->cmd = ETHTOOL_SFEATURES;
  sf->size = static_cast<uint32_t>(n);
  std::vector<size_t> asked;
  for (size_t bit : bits) {
    const uint32_t mask = 1u << (bit % 32);
    const ethtool_get_features_block& b = g->features[bit / 32];
    const bool active = b.active & mask;
    if (!(b.available & mask) || (b.never_changed & mask) || active == on) continue;
    sf->features[bit / 32].valid |= mask;
    if (on) sf->features[bit / 32].requested |= mask;
    asked.push_back(bit);
  }
  if (asked.empty()) return asked;
  // A positive return says some asked change did not happen; the read below tells which.
  if (!ethtool(fd, ifname, sf))
    return fail("{}: cannot set its features: {}", ifname, std::strerror(errno));
  if (!ethtool(fd, ifname, g))
    return fail("{}: cannot read its features: {}", ifname, std::strerror(errno));
  std::vector<size_t> done;
  for (size_t bit : asked) {
    if (bool(g->features[bit / 32].active & (1u << (bit % 32))) == on) done.push_back(bit);
  }
  return done;
}

// Sets the named features of `ifname` on or off; the names it changed.
Result<std::vector<std::string>> set_named_features(const std::string& ifname,
                                                    const std::vector<std::string>& wanted,
                                                    bool on) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("{}: no socket for ethtool: {}", ifname, std::strerror(errno));
  const std::vector<std::string> names = feature_names(fd, ifname);
  std::vector<size_t> bits;
  for (const auto& w : wanted) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == w) bits.push_back(i);
  }
  auto done = set_features(fd, ifname, names.size(), bits, on);
  close(fd);
  if (!done) return std::unexpected(done.error());
  std::vector<std::string> out;
  for (size_t bit : *done)
    out.push_back(names[bit]);
  return out;
}

}  // namespace

Result<InterfaceFeaturesOff> InterfaceFeaturesOff::apply(const std::string& ifname,
                                                         const std::vector<std::string>& names) {
  auto changed = set_named_features(ifname, names, false);
  if (!changed) return std::unexpected(changed.error());
  InterfaceFeaturesOff out;
  out.ifname_ = ifname;
  out.changed_ = std::move(*changed);
  return out;
}

InterfaceFeaturesOff::~InterfaceFeaturesOff() {
  if (changed_.empty()) return;
  // Best effort at stop: the interface may be gone (a deleted veth).
  (void)set_named_features(ifname_, changed_, true);
}

}  // namespace vecflow
