#include "pipeline/netlink.h"

#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <libmnl/libmnl.h>

namespace vecflow {

namespace {

// Receive buffer of the event socket. A routing daemon installing a full table or a burst of
// neighbour changes can queue thousands of messages between two polls; what does not fit is
// lost (ENOBUFS) and repaired by a full resynchronisation, so this trades memory for how often
// that happens.
constexpr int kEventSocketBuffer = 8 << 20;
// Receive buffer for dumps and events: the kernel fills up to 32 KB per read when dumping.
constexpr size_t kDumpBuffer = 32768;
// Buffer for a request we build or the acks we read back. libmnl's MNL_SOCKET_BUFFER_SIZE calls
// sysconf(), which would make every array of that size variable-length; 8192 is its upper bound.
constexpr size_t kRequestBuffer = 8192;
// Times a dump is repeated when the kernel reports that its table changed under it.
constexpr int kDumpRetries = 5;

// Neighbour states in which the kernel itself forwards with the cached address.
constexpr uint16_t kUsableNud =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

std::optional<IpAddress> attr_ip(const nlattr* a, int family) {
  if (a == nullptr) return std::nullopt;
  IpAddress ip;
  size_t len = mnl_attr_get_payload_len(a);
  if (family == AF_INET && len == 4) {
    ip.version = 4;
  } else if (family == AF_INET6 && len == 16) {
    ip.version = 6;
  } else {
    return std::nullopt;
  }
  std::memcpy(ip.bytes.data(), mnl_attr_get_payload(a), len);
  return ip;
}

// Collects a message's attributes by type (those past `max` are ignored).
struct Attrs {
  static constexpr int kMax = 64;
  const nlattr* tb[kMax + 1] = {};
  const nlattr* operator[](int type) const { return type <= kMax ? tb[type] : nullptr; }
};

int collect(const nlattr* a, void* data) {
  auto* attrs = static_cast<Attrs*>(data);
  int type = mnl_attr_get_type(a);
  if (type >= 0 && type <= Attrs::kMax) attrs->tb[type] = a;
  return MNL_CB_OK;
}

Attrs parse_attrs(const nlmsghdr* nlh, size_t header_len) {
  Attrs attrs;
  mnl_attr_parse(nlh, static_cast<unsigned>(header_len), collect, &attrs);
  return attrs;
}

std::optional<KernelLink> parse_link(const nlmsghdr* nlh) {
  auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  Attrs a = parse_attrs(nlh, sizeof(*ifi));
  if (a[IFLA_IFNAME] == nullptr) return std::nullopt;
  return KernelLink{ifi->ifi_index, mnl_attr_get_str(a[IFLA_IFNAME]),
                    (ifi->ifi_flags & IFF_UP) && (ifi->ifi_flags & IFF_RUNNING)};
}

std::optional<KernelAddress> parse_address(const nlmsghdr* nlh) {
  auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
  Attrs a = parse_attrs(nlh, sizeof(*ifa));
  // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS elsewhere.
  auto ip = attr_ip(a[IFA_LOCAL] ? a[IFA_LOCAL] : a[IFA_ADDRESS], ifa->ifa_family);
  if (!ip) return std::nullopt;
  return KernelAddress{static_cast<int>(ifa->ifa_index), *ip, ifa->ifa_scope,
                       (ifa->ifa_flags & IFA_F_SECONDARY) != 0};
}

std::optional<KernelNeighbour> parse_neighbour(const nlmsghdr* nlh) {
  auto* ndm = static_cast<const ndmsg*>(mnl_nlmsg_get_payload(nlh));
  Attrs a = parse_attrs(nlh, sizeof(*ndm));
  auto ip = attr_ip(a[NDA_DST], ndm->ndm_family);
  if (!ip) return std::nullopt;
  KernelNeighbour n{ndm->ndm_ifindex, *ip, std::nullopt};
  const nlattr* ll = a[NDA_LLADDR];
  if (nlh->nlmsg_type == RTM_NEWNEIGH && (ndm->ndm_state & kUsableNud) && ll != nullptr &&
      mnl_attr_get_payload_len(ll) == 6) {
    MacAddress mac;
    std::memcpy(mac.bytes.data(), mnl_attr_get_payload(ll), 6);
    n.mac = mac;
  }
  return n;
}

std::optional<KernelRoute> parse_route(const nlmsghdr* nlh) {
  auto* rtm = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  if (rtm->rtm_flags & RTM_F_CLONED) return std::nullopt;  // a cache entry, not a route
  if (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6) return std::nullopt;
  Attrs a = parse_attrs(nlh, sizeof(*rtm));
  KernelRoute r;
  r.type = rtm->rtm_type;
  r.protocol = rtm->rtm_protocol;
  r.table = a[RTA_TABLE] ? mnl_attr_get_u32(a[RTA_TABLE]) : rtm->rtm_table;
  r.metric = a[RTA_PRIORITY] ? mnl_attr_get_u32(a[RTA_PRIORITY]) : 0;
  r.prefix.addr.version = rtm->rtm_family == AF_INET ? 4 : 6;
  r.prefix.length = rtm->rtm_dst_len;
  if (a[RTA_DST]) {
    auto dst = attr_ip(a[RTA_DST], rtm->rtm_family);
    if (!dst) return std::nullopt;
    r.prefix.addr = *dst;
  }
  if (a[RTA_VIA]) r.foreign_gateway = true;
  if (a[RTA_MULTIPATH]) {
    const nlattr* mp = a[RTA_MULTIPATH];
    auto* nh = static_cast<const rtnexthop*>(mnl_attr_get_payload(mp));
    int left = static_cast<int>(mnl_attr_get_payload_len(mp));
    while (left >= static_cast<int>(sizeof(rtnexthop)) && nh->rtnh_len >= sizeof(rtnexthop) &&
           nh->rtnh_len <= left) {
      KernelNextHop hop{nh->rtnh_ifindex, std::nullopt};
      // The attributes of one next hop follow its rtnexthop header.
      int alen = nh->rtnh_len - static_cast<int>(RTNH_LENGTH(0));
      auto* attr = reinterpret_cast<const nlattr*>(RTNH_DATA(nh));
      while (mnl_attr_ok(attr, alen)) {
        if (mnl_attr_get_type(attr) == RTA_GATEWAY) hop.via = attr_ip(attr, rtm->rtm_family);
        if (mnl_attr_get_type(attr) == RTA_VIA) r.foreign_gateway = true;
        attr = mnl_attr_next(attr);
      }
      r.nexthops.push_back(hop);
      left -= RTNH_ALIGN(nh->rtnh_len);
      nh = RTNH_NEXT(nh);
    }
  } else if (a[RTA_OIF]) {
    KernelNextHop hop{static_cast<int>(mnl_attr_get_u32(a[RTA_OIF])), std::nullopt};
    hop.via = attr_ip(a[RTA_GATEWAY], rtm->rtm_family);
    r.nexthops.push_back(hop);
  } else if (a[RTA_NH_ID]) {
    r.foreign_gateway = true;  // a nexthop object without the expanded compatibility form
  }
  return r;
}

int dispatch(const nlmsghdr* nlh, void* data) {
  (*static_cast<const std::function<void(const nlmsghdr*)>*>(data))(nlh);
  return MNL_CB_OK;
}

}  // namespace

void NetlinkSocket::Close::operator()(mnl_socket* s) const noexcept {
  mnl_socket_close(s);
}

NetlinkSocket::~NetlinkSocket() = default;

Result<NetlinkSocket> NetlinkSocket::open(uint32_t groups, bool nonblocking) {
  NetlinkSocket s;
  mnl_socket* nl =
      mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0));
  if (nl == nullptr) return fail("cannot open a netlink socket: {}", errno_text(errno));
  s.sock_.reset(nl);
  if (mnl_socket_bind(nl, groups, MNL_SOCKET_AUTOPID) < 0)
    return fail("cannot bind a netlink socket: {}", errno_text(errno));
  s.portid_ = mnl_socket_get_portid(nl);
  if (groups != 0) {
    int size = kEventSocketBuffer;
    int fd = mnl_socket_get_fd(nl);
    // FORCE goes past net.core.rmem_max (needs CAP_NET_ADMIN); otherwise take what is allowed.
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  return s;
}

int NetlinkSocket::fd() const noexcept {
  return mnl_socket_get_fd(sock_.get());
}

Result<void> NetlinkSocket::dump(uint16_t type, int family,
                                 const std::function<void(const nlmsghdr*)>& fn) {
  for (int attempt = 0; attempt < kDumpRetries; ++attempt) {
    char req[kRequestBuffer];
    nlmsghdr* nlh = mnl_nlmsg_put_header(req);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    nlh->nlmsg_seq = ++seq_;
    switch (type) {
      case RTM_GETLINK:
        static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)))->ifi_family =
            static_cast<unsigned char>(family);
        break;
      case RTM_GETADDR:
        static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)))->ifa_family =
            static_cast<unsigned char>(family);
        break;
      case RTM_GETROUTE:
        static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)))->rtm_family =
            static_cast<unsigned char>(family);
        break;
      default:
        static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)))->ndm_family =
            static_cast<unsigned char>(family);
        break;
    }
    if (mnl_socket_sendto(sock_.get(), nlh, nlh->nlmsg_len) < 0)
      return fail("netlink dump request: {}", errno_text(errno));

    bool interrupted = false;
    std::function<void(const nlmsghdr*)> each = [&](const nlmsghdr* m) {
      if (m->nlmsg_flags & NLM_F_DUMP_INTR) interrupted = true;
      fn(m);
    };
    std::vector<char> buf(kDumpBuffer);
    for (;;) {
      ssize_t n = mnl_socket_recvfrom(sock_.get(), buf.data(), buf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail("netlink dump: {}", errno_text(errno));
      }
      int rc =
          mnl_cb_run(buf.data(), static_cast<size_t>(n), nlh->nlmsg_seq, portid_, dispatch, &each);
      if (rc == MNL_CB_STOP) break;
      if (rc < 0) return fail("netlink dump: {}", errno_text(errno));
    }
    if (!interrupted) return {};
  }
  return fail("netlink dump: the kernel's table kept changing during {} attempts", kDumpRetries);
}

Result<std::vector<KernelLink>> NetlinkSocket::dump_links() {
  std::vector<KernelLink> out;
  auto r = dump(RTM_GETLINK, AF_UNSPEC, [&](const nlmsghdr* m) {
    if (auto l = parse_link(m)) out.push_back(*l);
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<std::vector<KernelAddress>> NetlinkSocket::dump_addresses(int family) {
  std::vector<KernelAddress> out;
  auto r = dump(RTM_GETADDR, family, [&](const nlmsghdr* m) {
    if (auto a = parse_address(m)) out.push_back(*a);
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<std::vector<KernelRoute>> NetlinkSocket::dump_routes(int family) {
  std::vector<KernelRoute> out;
  auto r = dump(RTM_GETROUTE, family, [&](const nlmsghdr* m) {
    if (auto rt = parse_route(m)) out.push_back(std::move(*rt));
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<std::vector<KernelNeighbour>> NetlinkSocket::dump_neighbours(int family) {
  std::vector<KernelNeighbour> out;
  auto r = dump(RTM_GETNEIGH, family, [&](const nlmsghdr* m) {
    if (auto n = parse_neighbour(m)) out.push_back(*n);
  });
  if (!r) return std::unexpected(r.error());
  return out;
}

Result<void> NetlinkSocket::request_resolution(int ifindex, const IpAddress& ip) {
  char buf[kRequestBuffer];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWNEIGH;
  // CREATE: the kernel may not know the neighbour yet; the entry it makes starts resolving.
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
  nlh->nlmsg_seq = ++seq_;
  auto* ndm = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  ndm->ndm_family = ip.version == 4 ? AF_INET : AF_INET6;
  ndm->ndm_ifindex = ifindex;
  ndm->ndm_state = NUD_NONE;
  ndm->ndm_flags = NTF_USE;
  mnl_attr_put(nlh, NDA_DST, ip.version == 4 ? 4 : 16, ip.bytes.data());
  if (mnl_socket_sendto(sock_.get(), nlh, nlh->nlmsg_len) < 0)
    return fail("netlink neighbour request: {}", errno_text(errno));
  return {};
}

size_t NetlinkSocket::drain_acks(size_t& pending) noexcept {
  size_t errors = 0;
  char buf[kRequestBuffer];
  for (;;) {
    ssize_t n = recv(fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    int len = static_cast<int>(n);
    for (auto* m = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(m, len);
         m = mnl_nlmsg_next(m, &len)) {
      if (m->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(m));
        if (e->error != 0) ++errors;
        if (pending > 0) --pending;
      }
    }
  }
  return errors;
}

std::vector<KernelEvent> NetlinkSocket::read_events(size_t max) {
  std::vector<KernelEvent> out;
  std::vector<char> buf(kDumpBuffer);
  while (out.size() < max) {
    ssize_t n = recv(fd(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == ENOBUFS) {
        out.push_back(KernelEvent{KernelEvent::Kind::Overrun, false, std::nullopt});
        continue;
      }
      break;  // EAGAIN: nothing more
    }
    int len = static_cast<int>(n);
    for (auto* m = reinterpret_cast<const nlmsghdr*>(buf.data()); mnl_nlmsg_ok(m, len);
         m = mnl_nlmsg_next(m, &len)) {
      switch (m->nlmsg_type) {
        case RTM_NEWLINK:
        case RTM_DELLINK:
          out.push_back(KernelEvent{KernelEvent::Kind::Link, m->nlmsg_type == RTM_DELLINK, {}});
          break;
        case RTM_NEWADDR:
        case RTM_DELADDR:
          out.push_back(KernelEvent{KernelEvent::Kind::Address, m->nlmsg_type == RTM_DELADDR, {}});
          break;
        case RTM_NEWROUTE:
        case RTM_DELROUTE:
          out.push_back(KernelEvent{KernelEvent::Kind::Route, m->nlmsg_type == RTM_DELROUTE, {}});
          break;
        case RTM_NEWNEIGH:
        case RTM_DELNEIGH:
          if (auto nb = parse_neighbour(m)) {
            out.push_back(
                KernelEvent{KernelEvent::Kind::Neighbour, m->nlmsg_type == RTM_DELNEIGH, nb});
          }
          break;
        default:
          break;
      }
    }
  }
  return out;
}

}  // namespace vecflow
