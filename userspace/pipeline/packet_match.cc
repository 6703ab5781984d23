#include "pipeline/packet_match.h"

#include <cstring>

#include "pipeline/packet_view.h"

namespace vecflow {

namespace {

void set_net(const std::optional<IpPrefix>& p, bool& set, uint8_t& version, uint8_t* addr,
             uint8_t* mask) {
  if (!p) return;
  set = true;
  version = p->addr.version;
  for (unsigned bit = 0; bit < p->length; ++bit)
    mask[bit / 8] |= static_cast<uint8_t>(0x80u >> (bit % 8));
  for (unsigned i = 0; i < 16; ++i)
    addr[i] = p->addr.bytes[i] & mask[i];
}

}  // namespace

PacketMatch::PacketMatch(const config::FiveTupleMatch& m) {
  set_net(m.src, src_.set, src_.version, src_.addr, src_.mask);
  set_net(m.dst, dst_.set, dst_.version, dst_.addr, dst_.mask);
  if (m.l4_proto) proto_ = *m.l4_proto;
  if (m.src_port) src_port_ = *m.src_port;
  if (m.dst_port) dst_port_ = *m.dst_port;
  ports_ = m.src_port || m.dst_port;
  any_ = !m.src && !m.dst && !m.l4_proto && !ports_;
}

bool PacketMatch::in(const Net& n, const uint8_t* a, uint8_t version) noexcept {
  if (!n.set) return true;
  if (n.version != version) return false;
  const unsigned len = version == 4 ? 4 : 16;
  for (unsigned i = 0; i < len; ++i) {
    if ((a[i] & n.mask[i]) != n.addr[i]) return false;
  }
  return true;
}

bool PacketMatch::matches(const rte_mbuf* m) const noexcept {
  if (any_) return true;
  const uint8_t *src, *dst;
  uint8_t version;
  if (pkt::is_ipv4(m)) {
    const rte_ipv4_hdr* ip = pkt::ipv4(m);
    src = reinterpret_cast<const uint8_t*>(&ip->src_addr);
    dst = reinterpret_cast<const uint8_t*>(&ip->dst_addr);
    version = 4;
  } else if (pkt::is_ipv6(m)) {
    const rte_ipv6_hdr* ip = pkt::ipv6(m);
    src = ip->src_addr;
    dst = ip->dst_addr;
    version = 6;
  } else {
    return false;
  }
  if (!in(src_, src, version) || !in(dst_, dst, version)) return false;
  if (proto_ >= 0 && pkt::l4_proto(m) != proto_) return false;
  if (ports_) {
    uint16_t sp, dp;
    pkt::ports(m, sp, dp);
    sp = rte_be_to_cpu_16(sp);
    dp = rte_be_to_cpu_16(dp);
    if (sp < src_port_.low || sp > src_port_.high || dp < dst_port_.low || dp > dst_port_.high)
      return false;
  }
  return true;
}

}  // namespace vecflow
