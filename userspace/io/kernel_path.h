// The exception path of a port: a TAP interface through which packets with Verdict::Kernel
// reach the kernel stack.
//
// The TAP carries the port's MAC address, so the frames (addressed to the port) are taken as
// "for this host". The kernel delivers what arrives on it to its local addresses (Linux accepts
// a packet for any of its addresses on any interface) and answers through its normal routes, so
// replies leave through the kernel interface itself. Its reverse-path filter is set to loose,
// since the senders are routed through the port's interface, not through the TAP; and as that
// filter drops everything arriving on an interface without an IPv4 address, the TAP gets the
// link-local 169.254.255.254/32, which routes nothing. It generates no IPv6 link-local
// address. What the kernel sends out through the TAP is not read: nothing is routed there.
//
// One TAP queue (IFF_MULTI_QUEUE file descriptor) per port tx queue, so lcores never share one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/net.h"

struct rte_mbuf;

namespace vecflow {

class KernelPath {
 public:
  // Creates the TAP in the calling thread's network namespace. Fails if an interface of that
  // name exists already.
  static Result<std::unique_ptr<KernelPath>> create(const std::string& name, uint16_t queues,
                                                    const MacAddress& mac);
  // Closing the queues removes the TAP (it is not persistent).
  ~KernelPath();
  KernelPath(const KernelPath&) = delete;
  KernelPath& operator=(const KernelPath&) = delete;

  const std::string& name() const noexcept { return name_; }
  uint16_t queues() const noexcept { return static_cast<uint16_t>(fds_.size()); }

  // Writes up to `n` packets to TAP queue `q` (one write per packet: the exception path is for
  // the few packets the kernel must see, not for bulk traffic). Returns how many the kernel
  // took, frees those and adds their length to `bytes`; the rest stay with the caller.
  uint16_t send(uint16_t q, rte_mbuf** pkts, uint16_t n, uint64_t& bytes) noexcept;

 private:
  KernelPath() = default;
  std::string name_;
  std::vector<int> fds_;
};

}  // namespace vecflow
