// The AF_XDP sockets this process has open, found by their descriptors.
//
// Used for the queues of an AF_XDP port that DPDK's net_af_xdp PMD serves: the PMD keeps its
// sockets to itself, but vecflow must insert them into the steering program's XSKMAP and may
// sleep on them. Each such queue is its own net_af_xdp device with one socket, so the socket
// that appears while the device is set up is that queue's. (The kernel's socket table, xdp_diag,
// would name the queue directly, but kernels are built without it: CONFIG_XDP_SOCKETS_DIAG is
// off on these machines.) Ports are set up one at a time on the control thread, so no other
// AF_XDP socket appears meanwhile.
#pragma once

#include <set>

namespace vecflow {

// Descriptors of every AF_XDP socket of this process (SO_DOMAIN == AF_XDP).
std::set<int> open_xsk_fds();

}  // namespace vecflow
