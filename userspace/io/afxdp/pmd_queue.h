// The queues of an afxdp port that DPDK owns (`queues: [{..., owner: dpdk}]`): each is served
// by a net_af_xdp device of its own, on that one queue of the interface, whose AF_XDP socket
// the steering program redirects to as it does to vecflow's own sockets. This is where what
// DPDK 22.11's net_af_xdp does to the rest of the port is undone: it attaches an XDP program
// with every device (and refuses an interface that has one), detaches whatever program the
// interface has when a device closes, and leaves the buffers its socket holds taken.
//
// Not on the per-packet path: the port polls and sends through the device directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ids.h"
#include "io/dpdk/ethdev.h"

namespace vecflow {

class PacketPool;

struct PmdQueue {
  uint16_t device_queue = 0;
  EthDevice dev;  // the net_af_xdp device serving the queue
  int fd = -1;    // its AF_XDP socket (borrowed; io/afxdp/xsk_fds.h)
};

struct PmdQueueOptions {
  std::string port_name;
  PortId port{};
  std::string ifname;
  int ifindex = 0;
  uint16_t descriptors = 0;  // rx and tx descriptors: the device's AF_XDP ring sizes
  std::string xdp_prog;      // the PMD's xdp_prog devarg; empty: libxdp's default
  uint32_t busy_budget = 0;  // the PMD's busy_budget devarg (0: no busy polling)
  PacketPool* pool = nullptr;
};

// The DPDK-owned queues of one port, and the XDP programs their devices attached. With
// `xdp_prog` (the steering object) the first device's instance stays attached for the steering
// part to adopt (XdpSteering::adopt); for each further device it steps aside while the device
// is set up and comes back after. Without it, each device's program is detached again.
class PmdQueues {
 public:
  explicit PmdQueues(PmdQueueOptions o) : opt_(std::move(o)) {}
  ~PmdQueues();
  PmdQueues(const PmdQueues&) = delete;
  PmdQueues& operator=(const PmdQueues&) = delete;

  // Sets up the device of `q.device_queue` on the pool, configured but not started. An error
  // leaves the interface's programs as they were.
  Result<void> open(PmdQueue& q);
  // Closes the device: the buffers its socket held go back to the pool, and a program of
  // another part (the steering program) that the close detached is attached again. The caller
  // stopped the device and took its socket out of the XSKMAP, so the kernel fills its rings no
  // more.
  void close(PmdQueue& q) noexcept;

 private:
  PmdQueueOptions opt_;
  std::vector<uint32_t> pmd_progs_;  // every program a device of this port attached
  uint32_t kept_prog_id_ = 0;
  int kept_prog_fd_ = -1;
  uint32_t kept_flags_ = 0;
};

}  // namespace vecflow
