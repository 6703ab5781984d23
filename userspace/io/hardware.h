// What a port's device is (`vecflowctl hardware`): driver, bus address, NUMA node, speed, MTU,
// queues, offloads and, for a kernel interface, the XDP program on it. Read on request by the
// control thread, from the kernel (ethtool ioctls, sysfs, BPF) or from DPDK (ethdev info);
// nothing here runs on the data path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace vecflow {

struct PortHardware {
  std::string driver;       // kernel driver or DPDK PMD
  std::string bus;          // bus address (PCI "0000:03:00.0"), "vdev", or empty
  int numa_node = -1;       // -1: none or unknown
  uint32_t speed_mbps = 0;  // 0: unknown
  uint32_t mtu = 0;
  uint16_t rx_queues = 0;  // configured (a kernel interface: its channels)
  uint16_t rx_queues_max = 0;
  uint16_t tx_queues = 0;
  uint16_t tx_queues_max = 0;
  std::vector<std::string> offloads;  // enabled, in the driver's or DPDK's words
  std::string xdp_mode;               // native, generic, offload, several; empty: none
  uint32_t xdp_program_id = 0;
  std::string xdp_program;  // the program's name (libxdp's dispatcher when several share it)
};

// A kernel interface in the calling thread's network namespace.
PortHardware interface_hardware(const std::string& ifname);
// A DPDK ethdev.
PortHardware ethdev_hardware(uint16_t port_id);

// The MTU alone, as the two above read it; 0 when there is none to read.
uint32_t interface_mtu(const std::string& ifname);
uint32_t ethdev_mtu(uint16_t port_id);
// Sets a kernel interface's MTU (SIOCSIFMTU), as `ip link set IF mtu N` does.
Result<void> set_interface_mtu(const std::string& ifname, uint32_t mtu);

}  // namespace vecflow
