// How many rx queues a kernel interface has now: what AF_XDP's bind checks a queue id
// against (the driver's real_num_rx_queues), and what `queues: all` reads.
#pragma once

#include <string>

#include "core/error.h"

namespace vecflow {

// ETHTOOL_GCHANNELS (rx + combined channels); where the driver does not report channels, the
// rx-N entries of /sys/class/net/IFNAME/queues (of the network namespace sysfs was mounted
// in); one queue when neither answers, as libxdp assumes. `ctl` is any socket, -1 to open one.
Result<unsigned> interface_rx_queues(const std::string& ifname, int ctl = -1);

}  // namespace vecflow
