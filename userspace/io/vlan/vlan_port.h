// A VLAN sub-interface: an 802.1Q VLAN of another port's link as a port of its own, with its
// own id, MTU, counters, exception path and kernel device (router on a stick, as VPP's
// sub-interfaces and Linux's VLAN devices). QinQ stacks two: a port with an 802.1ad service
// tag, and VLAN ports of it for the customers' 802.1Q tags inside.
//
// Receive: it has no queues. Its parent's rx burst hands each frame tagged with the VLAN to
// it: the tags are removed and the frame's port becomes the sub-interface's (VlanDemux,
// io/vlan/vlan_demux.h), so every stage sees an untagged frame from an L3 interface, as Linux's
// VLAN device does. Transmit: the neighbour stage wrote the tag of most packets with their MACs
// (kMetaFlagTagged: all of its tags); the port tags the others and sends them on the parent's
// tx queue of the same index (each worker's own, the same lcore rule); a QinQ port's parent is
// the service VLAN's port, which adds the outer tag. The kernel side is the Linux VLAN
// device on the parent's interface: vecflowd creates it when it is missing (and removes it
// at stop) or follows the one there, so that ARP/ND (the steering program passes them to the
// kernel), addresses, neighbours and routes work per VLAN through KernelSync.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "io/port.h"
#include "io/vlan/vlan_demux.h"

namespace vecflow {

struct VlanOptions {
  uint16_t vlan = 0;                    // 1..4094
  std::string interface;                // the Linux VLAN device; empty: none (a DPDK parent's VLAN)
  std::string parent_interface;         // the parent's kernel interface, which the device sits on
  std::optional<uint32_t> mtu;          // set on the device when given
  uint16_t tpid = RTE_ETHER_TYPE_VLAN;  // or RTE_ETHER_TYPE_QINQ (802.1ad)
};

class VlanPort final : public Port {
 public:
  // `parent` outlives this port.
  VlanPort(std::string name, PortId id, Port& parent, VlanOptions options);
  ~VlanPort() override;

  std::string_view kind() const noexcept override { return "vlan"; }
  uint16_t rx_queue_count() const noexcept override { return 0; }
  uint16_t tx_queue_count() const noexcept override { return parent_.tx_queue_count(); }
  // Never called: frames arrive through the parent's bursts.
  uint16_t rx_burst(uint16_t, rte_mbuf**, uint16_t) noexcept override { return 0; }
  // Tags the packets not tagged yet and offers them to the parent's queue `q`; those it
  // refuses go back to the caller as they came.
  uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  // Up when the parent's link and the VLAN device are (the parent's, without a device).
  LinkState link_state() const noexcept override;
  // Creates the VLAN device if there is none (up, with the MTU the file gives). On a kernel
  // without 802.1Q the port runs without one, and says so.
  Result<void> start() override;
  // Removes the VLAN device if start() created it.
  void stop() noexcept override;

  MacAddress mac() const noexcept override { return parent_.mac(); }
  uint32_t device_mtu() const override;
  PortStatus status() const override;

  uint16_t vlan() const noexcept { return opt_.vlan; }
  uint16_t tpid() const noexcept { return opt_.tpid; }
  const Port& parent() const noexcept { return parent_; }
  const std::string& interface() const noexcept { return opt_.interface; }

 private:
  Port& parent_;
  VlanOptions opt_;
  bool created_ = false;     // start() made the device: stop() removes it
  bool has_device_ = false;  // the kernel has the device (it may lack 802.1Q altogether)
  int ctl_ = -1;             // a socket for the interface flag ioctl
};

}  // namespace vecflow
