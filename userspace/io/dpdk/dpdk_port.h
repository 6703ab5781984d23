// A DPDK port: an ethdev of any PMD, made from the appliance file's devargs (a vdev such as
// "net_pcap0,rx_pcap=in.pcap", "net_tap0,iface=tap0", "net_vhost0,iface=/run/vm1.sock", or a
// PCI address), with its queues on the appliance's PacketPool.
//
// Received frames are parsed once (core/parse.h) for packet_type, l2_len, l3_len; the flow id is
// the NIC's RSS hash when the PMD delivers one (unless scheduler.flow_id is software), else the
// software vf_flow_hash the XDP program also computes. Malformed frames are dropped here, counted
// per queue under their reason (steering.malformed: drop), or delivered as non-IP.
//
// VM ports: net_vhost serves a vhost-user socket; the guest (QEMU's virtio-net, or DPDK's
// net_virtio_user) chooses split or packed virtqueues, and vhost offers packed ones, so a guest
// started with packed=on gets them. Packed rings are the documented default for new VMs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/dpdk/ethdev.h"
#include "io/port.h"
#include "io/rx_classify.h"

namespace vecflow {

class PacketPool;

struct DpdkOptions {
  std::string devargs;
  uint16_t queues = 1;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  bool rx_interrupts = true;  // offer rx interrupts for sleeping where the PMD has them
  RxClassify classify;        // port id is filled in by create()
  // The kernel interface the device sits on (`iface=` of net_af_xdp, net_af_packet, net_tap),
  // "" for none: its MTU is the link's (the ethdev reports its own default, 1500, whatever
  // the interface carries).
  std::string interface;
  uint32_t mtu = 0;  // set before start: on `interface` if any, else the ethdev, else (a
                     // device with no MTU to set, net_vhost) kept as the port's; 0: as is
};

class DpdkPort final : public Port {
 public:
  static Result<std::unique_ptr<DpdkPort>> create(std::string name, PortId id,
                                                  const DpdkOptions& options, PacketPool& pool);
  ~DpdkPort() override;

  std::string_view kind() const noexcept override { return "dpdk"; }
  uint16_t rx_queue_count() const noexcept override { return queues_; }
  uint16_t tx_queue_count() const noexcept override { return queues_; }
  uint16_t rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  LinkState link_state() const noexcept override { return dev_.link_state(); }
  MacAddress mac() const noexcept override { return dev_.mac(); }
  Result<void> start() override;
  void stop() noexcept override;
  // Rx interrupts: enables the queue's interrupt and returns its descriptor, unless packets
  // are already waiting (then -1, and the caller polls again). Frames that came before the
  // interrupt was on raise none, and a PMD's count of waiting frames is not reliable (vhost
  // with packed rings reports one that is not there): so arming takes one look at the ring,
  // and what it finds is handed out by the next rx_burst.
  int arm_wakeup(uint16_t q) noexcept override;
  void disarm_wakeup(uint16_t q) noexcept override;
  PortStatus status() const override;
  PortHardware hardware() const override;
  uint32_t device_mtu() const override;
  void set_flow_hash(bool needed, const FlowHashRewrite* rewrite) noexcept override;
  void set_vlans(const VlanDemux* demux) noexcept override;

  // DPDK's port id of the device (not vecflow's PortId).
  uint16_t ethdev() const noexcept { return dev_.port(); }

 private:
  DpdkPort(std::string name, PortId id) : Port(std::move(name), id) {}

  // Frames found by the look arm_wakeup() takes after enabling the interrupt, handed out by
  // the next rx_burst before anything else. 32: one look's worth; more wait in the ring.
  static constexpr uint16_t kStash = 32;

  struct Wake {
    int fd = -1;           // the descriptor last handed out
    bool eventfd = false;  // it counts events (vhost kicks, VFIO): read it empty on disarm
    bool armed = false;
    uint16_t stashed = 0;
    rte_mbuf* stash[kStash];
  };

  EthDevice dev_;
  uint16_t queues_ = 0;
  RxClassify classify_;
  bool try_meta_ = false;     // net_af_xdp: frames may carry the steering program's metadata
  std::string interface_;     // DpdkOptions::interface
  uint32_t own_mtu_ = 0;      // the file's MTU where the device has none to set (net_vhost)
  std::string vhost_socket_;  // net_vhost: its vhost-user socket (status: the ring layout)
  std::unique_ptr<Wake[]> wake_;
};

}  // namespace vecflow
