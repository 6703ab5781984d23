// The MTU of each port: the largest IP packet (L2 header not included) its link carries, as the
// device reports it (the kernel interface's MTU for AF_XDP ports and DPDK ports on a kernel
// interface, the ethdev's otherwise). The one place the data path reads it: the route stage
// answers a packet too big for its egress link (ICMP fragmentation needed / packet too big),
// the tx adapter fragments or drops what still does not fit (sched/tx_adapter.h).
//
// Threading: the control thread writes (when the ports start, and on every link event, as
// the link state is followed); lcores read with relaxed loads. A packet routed while the MTU
// changes meets the old or the new value, as in Linux.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace vecflow {

class PortMtuTable {
 public:
  // What a port whose device reports no MTU is taken to carry: no check stops its packets.
  static constexpr uint32_t kUnknown = 0xffff;

  explicit PortMtuTable(size_t ports)
      : ports_(ports), mtu_(std::make_unique<std::atomic<uint32_t>[]>(ports)) {
    for (size_t i = 0; i < ports; ++i)
      mtu_[i].store(kUnknown, std::memory_order_relaxed);
  }

  // The MTU of port `port` (a PortId's index); kUnknown for an index past the ports.
  uint32_t get(uint16_t port) const noexcept {
    return port < ports_ ? mtu_[port].load(std::memory_order_relaxed) : kUnknown;
  }
  // Control thread. Returns whether the value changed. 0 (a device that says nothing) is
  // stored as kUnknown.
  bool set(uint16_t port, uint32_t mtu) noexcept {
    if (port >= ports_) return false;
    if (mtu == 0) mtu = kUnknown;
    return mtu_[port].exchange(mtu, std::memory_order_relaxed) != mtu;
  }
  size_t ports() const noexcept { return ports_; }

 private:
  size_t ports_;
  std::unique_ptr<std::atomic<uint32_t>[]> mtu_;
};

}  // namespace vecflow
