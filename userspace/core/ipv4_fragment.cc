#include "core/ipv4_fragment.h"

#include <algorithm>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_ip.h>
#include <rte_mbuf_ptype.h>

#include "core/packet.h"

namespace vecflow {

namespace {

constexpr uint8_t kOptEnd = 0;
constexpr uint8_t kOptNop = 1;
constexpr uint8_t kOptCopied = 0x80;  // the option is copied into every fragment

// The options of a header for the fragments after the first: those without the "copied" flag
// become no-operation options, so that every fragment's header keeps the first one's length.
void strip_uncopied_options(uint8_t* opt, uint32_t len) noexcept {
  for (uint32_t i = 0; i < len;) {
    const uint8_t type = opt[i];
    if (type == kOptEnd) break;
    if (type == kOptNop) {
      ++i;
      continue;
    }
    // The parser accepted the header, not the options: a length that runs past the header
    // ends the walk rather than the buffer.
    const uint32_t olen = i + 1 < len ? opt[i + 1] : 0;
    if (olen < 2 || i + olen > len) break;
    if (!(type & kOptCopied)) std::memset(opt + i, kOptNop, olen);
    i += olen;
  }
}

}  // namespace

unsigned ipv4_fragment(const rte_mbuf* m, uint32_t mtu, rte_mbuf** out) noexcept {
  const uint32_t l2 = m->l2_len;
  const auto* base = rte_pktmbuf_mtod(m, const uint8_t*);
  const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(base + l2);
  const uint16_t frag = rte_be_to_cpu_16(ip->fragment_offset);
  if (frag & RTE_IPV4_HDR_DF_FLAG) return 0;
  const uint32_t ihl = rte_ipv4_hdr_len(ip);
  // The parser checked the total length against the frame; what lies past it is padding.
  const uint32_t total = std::min<uint32_t>(rte_be_to_cpu_16(ip->total_length), m->pkt_len - l2);
  // A fragment is one buffer of the pool: under a large MTU (a 16 000-byte packet to a 9000-byte
  // link) fragments are cut to what a buffer holds, smaller than the MTU, as RFC 791 allows.
  const uint32_t room = rte_pktmbuf_data_room_size(m->pool) - RTE_PKTMBUF_HEADROOM;
  const uint32_t fit = std::min(mtu, room > l2 ? room - l2 : 0);
  if (total <= ihl || fit <= ihl) return 0;
  const uint32_t step = (fit - ihl) & ~7u;  // payload per fragment, in 8-byte units
  const uint32_t payload = total - ihl;
  if (step == 0) return 0;
  const unsigned count = (payload + step - 1) / step;
  if (count > kMaxFragments) return 0;
  // Fragments of a fragment: offsets continue the original's, and the last keeps its MF.
  const uint32_t first_offset = (frag & RTE_IPV4_HDR_OFFSET_MASK) * 8u;
  const bool more_after = frag & RTE_IPV4_HDR_MF_FLAG;
  // A fragment that reaches past the largest datagram (a "ping of death") has offsets the
  // 13-bit field cannot carry: not fragmented.
  if (first_offset + payload > 0xffff - ihl) return 0;
  if (rte_pktmbuf_alloc_bulk(m->pool, out, count) != 0) return 0;

  const uint32_t l4_type = RTE_PTYPE_L4_FRAG;
  for (unsigned i = 0; i < count; ++i) {
    rte_mbuf* f = out[i];
    const uint32_t off = i * step;
    const uint32_t len = std::min(step, payload - off);
    auto* d =
        reinterpret_cast<uint8_t*>(rte_pktmbuf_append(f, static_cast<uint16_t>(l2 + ihl + len)));
    if (d == nullptr) {  // a pool of buffers smaller than the original's: none kept
      rte_pktmbuf_free_bulk(out, count);
      return 0;
    }
    std::memcpy(d, base, l2 + ihl);  // the headers lie in the first segment (core/parse.h)
    uint8_t* to = d + l2 + ihl;
    const void* from = rte_pktmbuf_read(m, l2 + ihl + off, len, to);
    if (from != to) std::memcpy(to, from, len);
    auto* fip = reinterpret_cast<rte_ipv4_hdr*>(d + l2);
    if (i > 0 && ihl > sizeof(rte_ipv4_hdr))
      strip_uncopied_options(reinterpret_cast<uint8_t*>(fip + 1), ihl - sizeof(rte_ipv4_hdr));
    const bool mf = i + 1 < count || more_after;
    fip->fragment_offset = rte_cpu_to_be_16(
        static_cast<uint16_t>(((first_offset + off) / 8) | (mf ? RTE_IPV4_HDR_MF_FLAG : 0)));
    fip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(ihl + len));
    fip->hdr_checksum = 0;
    fip->hdr_checksum = rte_ipv4_cksum(fip);
    f->port = m->port;
    f->l2_len = m->l2_len;
    f->l3_len = m->l3_len;
    f->packet_type = (m->packet_type & ~RTE_PTYPE_L4_MASK) | l4_type;
    f->ol_flags = m->ol_flags & (RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_RSS_HASH);
    f->vlan_tci = m->vlan_tci;
    f->hash.rss = m->hash.rss;
    meta(f) = meta(m);
  }
  return count;
}

}  // namespace vecflow
