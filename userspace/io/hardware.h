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

// Offload features of a kernel interface turned off while vecflowd runs, as `ethtool -K IF
// NAME off` does, and put back on when this object goes (control thread, start and stop).
class InterfaceFeaturesOff {
 public:
  // `names` as the kernel names them (`ethtool -k` lists some under other words: its
  // rx-vlan-offload is rx-vlan-hw-parse). A feature the device lacks, cannot change or has off
  // already is left alone; changed() lists the others.
  static Result<InterfaceFeaturesOff> apply(const std::string& ifname,
                                            const std::vector<std::string>& names);
  InterfaceFeaturesOff(InterfaceFeaturesOff&& o) noexcept
      : ifname_(std::move(o.ifname_)), changed_(std::move(o.changed_)) {
    o.changed_.clear();
  }
  InterfaceFeaturesOff& operator=(InterfaceFeaturesOff&&) = delete;
  ~InterfaceFeaturesOff();

  const std::string& interface() const { return ifname_; }
  const std::vector<std::string>& changed() const { return changed_; }

 private:
  InterfaceFeaturesOff() = default;
  std::string ifname_;
  std::vector<std::string> changed_;
};

}  // namespace vecflow
