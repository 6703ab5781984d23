#include "io/vlan/vlan_port.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <rte_mbuf.h>

#include "core/log.h"
#include "core/vlan.h"
#include "io/hardware.h"

namespace vecflow {
namespace {

// Room for one request or acknowledgement: libmnl's MNL_SOCKET_BUFFER_SIZE is the page size,
// read at run time (a variable-length array); 8 KiB is at least a page on x86-64.
constexpr size_t kNetlinkBuffer = 8192;

// One rtnetlink request and its acknowledgement; on failure `err` holds the errno. Control
// thread, start and stop only.
Result<void> rtnl_request(nlmsghdr* nlh, const char* what, int* err = nullptr) {
  mnl_socket* nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (nl == nullptr) return fail("{}: no netlink socket: {}", what, std::strerror(errno));
  int e = 0;
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
      mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
    e = errno;
  } else {
    char buf[kNetlinkBuffer];
    const ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    if (n < 0 || mnl_cb_run(buf, static_cast<size_t>(n), nlh->nlmsg_seq, mnl_socket_get_portid(nl),
                            nullptr, nullptr) < 0) {
      e = errno;  // the kernel's answer, for an error message (mnl_cb_run)
    }
  }
  mnl_socket_close(nl);
  if (e == 0) return {};
  if (err != nullptr) *err = e;
  return fail("{}: {}", what, std::strerror(e));
}

// `ip link add link PARENT name NAME [mtu MTU] up type vlan [proto 802.1ad] id VLAN`.
Result<void> create_vlan_device(const VlanOptions& o, int& err) {
  const unsigned parent = if_nametoindex(o.parent_interface.c_str());
  if (parent == 0) return fail("interface {} does not exist", o.parent_interface);
  char buf[kNetlinkBuffer];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  nlh->nlmsg_seq = 1;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_flags = IFF_UP;
  ifi->ifi_change = IFF_UP;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, o.interface.c_str());
  mnl_attr_put_u32(nlh, IFLA_LINK, parent);
  if (o.mtu) mnl_attr_put_u32(nlh, IFLA_MTU, *o.mtu);
  nlattr* info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "vlan");
  nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  mnl_attr_put_u16(nlh, IFLA_VLAN_ID, o.vlan);
  mnl_attr_put_u16(nlh, IFLA_VLAN_PROTOCOL, htons(o.tpid));
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, info);
  return rtnl_request(nlh, "creating the VLAN device", &err);
}

Result<void> delete_device(const std::string& name) {
  const unsigned index = if_nametoindex(name.c_str());
  if (index == 0) return {};  // gone already (its parent was deleted)
  char buf[kNetlinkBuffer];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_DELLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = 1;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_index = static_cast<int>(index);
  return rtnl_request(nlh, "removing the VLAN device");
}

}  // namespace

VlanPort::VlanPort(std::string name, PortId id, Port& parent, VlanOptions options)
    : Port(std::move(name), id),
      parent_(parent),
      opt_(std::move(options)),
      ctl_(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
  size_counters(0, parent_.tx_queue_count());
}

VlanPort::~VlanPort() {
  stop();
  if (ctl_ >= 0) close(ctl_);
}

uint16_t VlanPort::tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  TxQueueCounters& c = tx_counter(q);
  // Read once: the mbuf stores below may alias them.
  const uint16_t tci = opt_.vlan;
  const uint16_t tpid = opt_.tpid;
  uint16_t ready = 0;
  for (; ready < n; ++ready) {
    rte_mbuf* m = pkts[ready];
    // The neighbour stage tagged most of them (kMetaFlagTagged); the rest (ICMP errors, packets
    // a next hop held, copies) are tagged here.
    if ((meta(m).flags & kMetaFlagTagged) || vlan_push(m, tci, tpid)) [[likely]]
      continue;
    // A clone (a mirror's copy shares its bytes with the original) or a buffer without
    // headroom: the tag goes on a copy. Without a buffer for one, the rest wait.
    rte_mbuf* copy = rte_pktmbuf_copy(m, m->pool, 0, UINT32_MAX);
    if (copy == nullptr || !vlan_push(copy, tci, tpid)) {
      rte_pktmbuf_free(copy);
      break;
    }
    rte_pktmbuf_free(m);
    pkts[ready] = copy;
    c.copies.add();
  }
  // Summed before the parent owns them; the refused ones are ours again after.
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < ready; ++i)
    bytes += pkts[i]->pkt_len;
  const uint16_t took = parent_.tx_burst(q, pkts, ready);
  for (uint16_t i = took; i < ready; ++i) {
    bytes -= pkts[i]->pkt_len;
    // Back to the caller as it gave them: what was tagged here loses its tag.
    if (!(meta(pkts[i]).flags & kMetaFlagTagged)) vlan_pop(pkts[i]);
  }
  c.packets.add(took);
  c.bytes.add(bytes);
  c.refused.add(n - took);
  return took;
}

LinkState VlanPort::link_state() const noexcept {
  const LinkState parent = parent_.link_state();
  if (parent != LinkState::Up || !has_device_) return parent;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, opt_.interface.c_str(), IFNAMSIZ - 1);
  if (ctl_ < 0 || ioctl(ctl_, SIOCGIFFLAGS, &ifr) != 0)
    return errno == ENODEV ? LinkState::Down : LinkState::Unknown;
  return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING) ? LinkState::Up
                                                                   : LinkState::Down;
}

Result<void> VlanPort::start() {
  if (opt_.interface.empty()) {
    log::get("io")->info("port {}: VLAN {} of port {}, without a kernel device", name(), opt_.vlan,
                         parent_.name());
    return {};
  }
  if (const auto* service = dynamic_cast<const VlanPort*>(&parent_);
      service != nullptr && !service->has_device_) {
    // A QinQ port's device sits on its service VLAN's, which this kernel could not make.
    log::get("io")->warn("port {}: VLAN {} of port {}, which has no kernel device: runs without {}",
                         name(), opt_.vlan, parent_.name(), opt_.interface);
    return {};
  }
  if (if_nametoindex(opt_.interface.c_str()) != 0) {
    // The operator's (or a previous run's) device: followed as it is. Its MTU is the file's
    // when the file gives one.
    if (opt_.mtu) {
      if (auto r = set_interface_mtu(opt_.interface, *opt_.mtu); !r)
        return fail("port {}: {}", name(), r.error().message);
    }
    has_device_ = true;
    log::get("io")->info("port {}: VLAN {} on {}, following {}", name(), opt_.vlan,
                         opt_.parent_interface, opt_.interface);
    return {};
  }
  int err = 0;
  if (auto r = create_vlan_device(opt_, err); !r) {
    if (err != EOPNOTSUPP)
      return fail("port {}: interface {} (VLAN {} on {}): {}", name(), opt_.interface, opt_.vlan,
                  opt_.parent_interface, r.error().message);
    // A kernel built without 802.1Q (CONFIG_VLAN_8021Q) has no VLAN devices: the VLAN still
    // forwards, its frames for the kernel still reach it through the exception path, but the
    // kernel neither answers ARP/ND on it nor learns its neighbours and routes.
    log::get("io")->warn(
        "port {}: this kernel has no VLAN devices (802.1Q): VLAN {} runs without {}; its "
        "neighbours must be static (neighbour stage `static`)",
        name(), opt_.vlan, opt_.interface);
    return {};
  }
  created_ = true;
  has_device_ = true;
  log::get("io")->info("port {}: VLAN {} on {}, created {}", name(), opt_.vlan,
                       opt_.parent_interface, opt_.interface);
  return {};
}

void VlanPort::stop() noexcept {
  if (!created_) return;
  created_ = false;
  if (auto r = delete_device(opt_.interface); !r)
    log::get("io")->warn("port {}: {}", name(), r.error().message);
}

uint32_t VlanPort::device_mtu() const {
  if (has_device_) return interface_mtu(opt_.interface);
  return opt_.mtu.value_or(parent_.device_mtu());
}

PortStatus VlanPort::status() const {
  PortStatus s = base_status();
  s.device = opt_.interface;
  // Its queues are the parent's: served and copied as those are.
  const PortStatus parent = parent_.status();
  for (QueueStatus& q : s.queues) {
    if (q.index >= parent.queues.size()) continue;
    q.served_by = fmt::format("{} queue {}", parent_.name(), q.index);
    q.copy = parent.queues[q.index].copy;
    q.device_queue = parent.queues[q.index].device_queue;
  }
  s.device_info.emplace_back("vlan.parent", parent_.name());
  s.device_info.emplace_back("vlan.id", std::to_string(opt_.vlan));
  s.device_info.emplace_back("vlan.proto", opt_.tpid == RTE_ETHER_TYPE_QINQ ? "802.1ad" : "802.1q");
  s.device_info.emplace_back("vlan.kernel_device", has_device_ ? (created_ ? "created" : "followed")
                                                   : opt_.interface.empty()
                                                       ? "none (a DPDK port's VLAN)"
                                                       : "none (no 802.1Q in the kernel)");
  return s;
}

}  // namespace vecflow
