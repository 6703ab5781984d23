#include "io/hardware.h"

#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
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

}  // namespace vecflow
