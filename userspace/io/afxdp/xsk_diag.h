// Which AF_XDP sockets of this process are bound to which interface queue, asked of the kernel
// (NETLINK_SOCK_DIAG, xdp_diag) and matched to this process's file descriptors.
//
// Used for the queues of an AF_XDP port that DPDK's net_af_xdp PMD serves: the PMD keeps its
// sockets to itself, but vecflow must insert them into the steering program's XSKMAP and may
// sleep on them. The kernel's socket table is the one public place that says which descriptor
// serves which queue.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace vecflow {

struct BoundXsk {
  int fd;  // this process's descriptor (not owned: borrowed from whoever created the socket)
  uint32_t queue_id;
};

// Every AF_XDP socket of this process bound to `ifindex` (in the calling thread's network
// namespace), sorted by queue id.
Result<std::vector<BoundXsk>> find_bound_xsks(int ifindex);

}  // namespace vecflow
