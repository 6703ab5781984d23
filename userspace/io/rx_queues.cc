#include "io/rx_queues.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace vecflow {
namespace {

// The rx-N entries under /sys/class/net/IFNAME/queues; 0 when there are none to read.
unsigned sysfs_rx_queues(const std::string& ifname) {
  std::error_code ec;
  unsigned n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/sys/class/net/" + ifname + "/queues", ec)) {
    if (e.path().filename().string().starts_with("rx-")) ++n;
  }
  return ec ? 0 : n;
}

}  // namespace

Result<unsigned> interface_rx_queues(const std::string& ifname, int ctl) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ)
    return fail("'{}' is not an interface name", ifname);
  int own = -1;
  if (ctl < 0) {
    own = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (own < 0) return fail("socket: {}", strerror(errno));
    ctl = own;
  }
  ethtool_channels ch{};
  ch.cmd = ETHTOOL_GCHANNELS;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&ch);
  const int rc = ioctl(ctl, SIOCETHTOOL, &ifr);
  const int err = errno;
  if (own >= 0) close(own);
  if (rc == 0 && ch.rx_count + ch.combined_count > 0) return ch.rx_count + ch.combined_count;
  if (rc != 0 && err != EOPNOTSUPP)
    return fail("cannot read the channels of {}: {}", ifname, strerror(err));
  return std::max(sysfs_rx_queues(ifname), 1u);
}

}  // namespace vecflow
