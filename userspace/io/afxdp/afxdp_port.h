// An AF_XDP port: a kernel interface whose frames the XDP steering program lifts to user space.
//
// Each queue the configuration gives to vecflow gets one AF_XDP socket (libxdp's xsk API). All
// sockets of the port share one UMEM registered over the PacketPool's memory, so every frame
// is an mbuf of the appliance's pool: received frames go to the rest of the engine as they
// are, and any pool mbuf leaves through the socket without a copy. The fill ring of each socket
// is topped up after every receive; the completion ring is drained on every transmit (and by
// tx_burst(q, nullptr, 0)). Buffers lent to the kernel are tagged (PacketPool::open_lender), so
// stop() returns every one of them to the pool.
//
// Queues the configuration gives to DPDK (`owner: dpdk`) are served by DPDK's net_af_xdp PMD,
// one device per queue (veth and many drivers report no combined channels, which caps that
// PMD at one queue per device), over the same pool. They appear here as queues of this port
// like the others (rx_burst/tx_burst with their index), so the engine does not care who reads
// a queue; status() names the owner of each.
//
// The XDP program belongs to the steering part: the port never attaches one of its own. It
// takes the fd of the program's XSKMAP (`xsks_map`) and inserts its sockets, and the PMD's, at
// their queue ids. DPDK 22.11's PMD attaches a program whenever it creates its socket (the
// `xdp_prog` object, else libxdp's default) and fails if the interface has one already, so the
// DPDK-owned queues are set up in create(), before the steering program is in place, in one of
// two ways:
//   - dpdk_xdp_prog = the steering object (what the appliance does): the instance DPDK attaches
//     with the first DPDK-owned queue stays attached, and the steering part adopts it
//     (XdpSteering::adopt) and fills its maps. For each further queue that instance steps aside
//     while the PMD attaches (and the port detaches) the device's own, then comes back.
//   - dpdk_xdp_prog empty: each device's program (libxdp's default) is detached again, and the
//     steering part attaches its program after create().
// Either way the start-up order for an interface is:
//   AfXdpPort::create -> steering attaches or adopts -> set_xsks_map(its xsks_map) -> start()
// (When a PMD device closes it detaches whatever program the interface has; the port puts back
// a program that is not one of the PMD's own, so closing it does not take steering down.)
//
// Metadata: when the steering program lifts a frame it writes struct vf_xdp_meta in front of it
// (bpf/include/vecflow/xdp_meta.h); the port copies it into the mbuf (flow id, packet type,
// header lengths, rule id). A frame without it (magic absent) is parsed once in software.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/port.h"
#include "io/rx_classify.h"

namespace vecflow {

class PacketPool;

enum class XskBind : uint8_t { Auto, Copy, ZeroCopy };

struct XskQueueRange {
  uint16_t first = 0;
  uint16_t count = 1;
  QueueOwner owner = QueueOwner::Vecflow;
};

struct AfXdpOptions {
  std::string interface;
  std::vector<XskQueueRange> queues{XskQueueRange{}};
  XskBind bind = XskBind::Auto;  // auto: zero-copy when the driver offers it, else copy
  bool busy_poll = false;        // SO_PREFER_BUSY_POLL with the two values below
  uint32_t busy_poll_budget = 64;
  uint32_t busy_poll_timeout_us = 20;
  uint32_t ring_size = 2048;  // rx, tx, fill and completion ring entries (power of two)
  RxClassify classify;        // port id, symmetric hash, malformed policy (port filled in)
  // Object handed to net_af_xdp as `xdp_prog` for DPDK-owned queues: the steering object,
  // whose first instance stays attached for adoption; empty: libxdp's default, detached again.
  std::string dpdk_xdp_prog;
};

class AfXdpPort final : public Port {
 public:
  // The most buffers (descriptors) one frame spans on a multi-buffer socket: the kernel builds
  // a copy-mode transmit as an skb of at most MAX_SKB_FRAGS (17) parts.
  static constexpr uint16_t kMaxBuffersPerFrame = 16;

  // Checks the interface and its queues, and sets up the DPDK-owned queues. Sockets of
  // vecflow's own queues are made by start(). Run in the interface's network namespace.
  static Result<std::unique_ptr<AfXdpPort>> create(std::string name, PortId id,
                                                   const AfXdpOptions& options, PacketPool& pool);
  ~AfXdpPort() override;

  // The steering program's XSKMAP. The port keeps a duplicate of the descriptor. May be set
  // again (a new program); start() inserts the sockets, stop() removes them.
  Result<void> set_xsks_map(int map_fd);

  std::string_view kind() const noexcept override { return "afxdp"; }
  uint16_t rx_queue_count() const noexcept override;
  uint16_t tx_queue_count() const noexcept override;
  uint16_t rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  LinkState link_state() const noexcept override;
  MacAddress mac() const noexcept override;
  // Creates the sockets (fill rings full), inserts them and the PMD's into the XSKMAP, starts
  // the DPDK-owned queues. Needs set_xsks_map() first.
  Result<void> start() override;
  // Removes the sockets from the XSKMAP, closes them and returns every buffer they held to the
  // pool; stops the DPDK-owned queues. No lcore may be polling the port.
  void stop() noexcept override;
  int arm_wakeup(uint16_t q) noexcept override;
  void disarm_wakeup(uint16_t q) noexcept override;
  PortStatus status() const override;
  PortHardware hardware() const override;
  uint32_t device_mtu() const override;
  void set_flow_hash(bool needed, const FlowHashRewrite* rewrite) noexcept override;
  void set_vlans(const VlanDemux* demux) noexcept override;

  struct Impl;

 private:
  AfXdpPort(std::string name, PortId id);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vecflow
