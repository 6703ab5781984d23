// Fuzzes the frame parser every packet meets first (bpf/include/vecflow/parse.h, the same code
// in the XDP program and in user space, core/parse.h). ASan catches any read past the frame:
// the fuzzer's bytes are copied into a buffer of exactly the frame's size. Beyond memory
// safety, every answer is checked against a reference parser written here from the header
// formats, in a plain style (offsets into a span), so a frame is malformed exactly when the
// reference finds a header at fault, with the same reason, and a well-formed frame's offsets,
// lengths, flags and flow key are the ones the reference reads. The same frame with only a
// first part readable (a multi-buffer frame) parses alike where its headers lie in that part.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "core/parse.h"
#include "fuzz_check.h"

using namespace vecflow;

namespace {

uint16_t be16(std::span<const uint8_t> f, size_t off) {
  return uint16_t(f[off] << 8 | f[off + 1]);
}

bool is_vlan(uint16_t type) {
  return type == 0x8100 || type == 0x88a8;
}

// The reference: what a frame holds, or the reason it is malformed.
struct Reference {
  std::optional<DropReason> bad;
  ParsedFrame p{};
};

// L4 header at `off`, which must end by `end` (the IP length's end).
std::optional<DropReason> ref_l4(std::span<const uint8_t> f, size_t off, size_t end, uint8_t proto,
                                 ParsedFrame& p) {
  const size_t room = end - off;
  switch (proto) {
    case 6: {
      if (room < 20) return DropReason::TCP_TRUNCATED;
      size_t doff = size_t(f[off + 12] >> 4) * 4;
      if (doff < 20 || doff > room) return DropReason::TCP_BAD_DOFF;
      p.l4_len = uint16_t(doff);
      break;
    }
    case 17: {
      if (room < 8) return DropReason::UDP_TRUNCATED;
      size_t len = be16(f, off + 4);
      // A first fragment's UDP length is the whole datagram's.
      const bool fragment = p.flags & VF_PARSED_FRAGMENT;
      if (len < 8 || (!fragment && len > room)) return DropReason::UDP_BAD_LEN;
      p.l4_len = 8;
      break;
    }
    case 132:
      if (room < 12) return DropReason::SCTP_TRUNCATED;
      p.l4_len = 12;
      break;
    case 1:
    case 58:
      if (room < 8) return DropReason::ICMP_TRUNCATED;
      p.l4_len = 8;
      return std::nullopt;
    default:
      return std::nullopt;
  }
  std::memcpy(&p.key.src_port, &f[off], 2);
  std::memcpy(&p.key.dst_port, &f[off + 2], 2);
  p.flags |= VF_PARSED_L4;
  return std::nullopt;
}

std::optional<DropReason> ref_ipv4(std::span<const uint8_t> f, size_t off, ParsedFrame& p) {
  const size_t room = f.size() - off;
  if (room < 20) return DropReason::IPV4_TRUNCATED;
  if (f[off] >> 4 != 4) return DropReason::IPV4_BAD_VERSION;
  size_t ihl = size_t(f[off] & 0x0f) * 4;
  if (ihl < 20 || ihl > room) return DropReason::IPV4_BAD_IHL;
  size_t total = be16(f, off + 2);
  if (total < ihl || total > room) return DropReason::IPV4_BAD_LEN;
  p.l3_len = uint16_t(ihl);
  p.key.ip_version = 4;
  p.key.l4_proto = f[off + 9];
  std::memcpy(p.key.src, &f[off + 12], 4);
  std::memcpy(p.key.dst, &f[off + 16], 4);
  uint16_t frag = be16(f, off + 6);
  bool more = frag & 0x2000, offset = frag & 0x1fff;
  if (more || offset) p.flags |= VF_PARSED_FRAGMENT;
  if (offset) {
    p.flags |= VF_PARSED_LATER_FRAG;
    return std::nullopt;
  }
  return ref_l4(f, off + ihl, off + total, p.key.l4_proto, p);
}

std::optional<DropReason> ref_ipv6(std::span<const uint8_t> f, size_t off, ParsedFrame& p) {
  if (f.size() - off < 40) return DropReason::IPV6_TRUNCATED;
  if (f[off] >> 4 != 6) return DropReason::IPV6_BAD_VERSION;
  const size_t end = off + 40 + be16(f, off + 4);
  if (end > f.size()) return DropReason::IPV6_BAD_LEN;
  p.key.ip_version = 6;
  std::memcpy(p.key.src, &f[off + 8], 16);
  std::memcpy(p.key.dst, &f[off + 24], 16);
  uint8_t next = f[off + 6];
  size_t at = off + 40;
  bool later = false;
  auto is_ext = [](uint8_t n) { return n == 0 || n == 43 || n == 60 || n == 51 || n == 44; };
  for (int walked = 0; is_ext(next); ++walked) {
    if (walked == VF_MAX_IPV6_EXT) return DropReason::IPV6_EXT_TOO_LONG;
    size_t need = next == 44 ? 8 : 2;
    if (end - at < need) return DropReason::IPV6_EXT_TRUNCATED;
    size_t len = next == 44 ? 8 : next == 51 ? (size_t(f[at + 1]) + 2) * 4 : (f[at + 1] + 1) * 8;
    if (next == 44) {
      p.flags |= VF_PARSED_FRAGMENT;
      if (be16(f, at + 2) & 0xfff8) later = true;
    }
    if (end - at < len) return DropReason::IPV6_EXT_TRUNCATED;
    next = f[at];
    at += len;
  }
  p.l3_len = uint16_t(at - off);
  p.key.l4_proto = next;
  if (later) {
    p.flags |= VF_PARSED_LATER_FRAG;
    return std::nullopt;
  }
  return ref_l4(f, at, end, next, p);
}

Reference reference(std::span<const uint8_t> f) {
  Reference r;
  ParsedFrame& p = r.p;
  if (f.size() < 14) {
    r.bad = DropReason::L2_TRUNCATED;
    return r;
  }
  size_t off = 14;
  uint16_t type = be16(f, 12);
  while (is_vlan(type) && p.vlan_count < VF_MAX_VLAN_TAGS) {
    if (f.size() - off < 4) {
      r.bad = DropReason::VLAN_TRUNCATED;
      return r;
    }
    if (p.vlan_count == 0) p.vlan_tci = be16(f, off);
    if (p.vlan_count == 1) p.vlan_tci_inner = be16(f, off);
    type = be16(f, off + 2);
    off += 4;
    ++p.vlan_count;
    p.flags |= VF_PARSED_VLAN;
  }
  if (is_vlan(type)) {
    r.bad = DropReason::VLAN_TOO_DEEP;
    return r;
  }
  p.eth_proto = type;
  p.l2_len = uint16_t(off);
  if (type == 0x0800) {
    r.bad = ref_ipv4(f, off, p);
  } else if (type == 0x86dd) {
    r.bad = ref_ipv6(f, off, p);
  } else if (type == 0x0806) {
    // ARP: the fixed 8 bytes, then two hardware and two protocol addresses.
    if (f.size() - off < 8 || f.size() - off < 8 + 2 * (size_t(f[off + 4]) + f[off + 5]))
      r.bad = DropReason::ARP_TRUNCATED;
  }
  return r;
}

bool is_malformed_reason(DropReason r) {
  return (r >= DropReason::L2_TRUNCATED && r <= DropReason::ICMP_TRUNCATED) ||
         r == DropReason::IPV6_BAD_VERSION || r == DropReason::SCTP_TRUNCATED;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy: one byte past the frame is outside the allocation, so ASan reports any
  // read beyond it (the fuzzer's own buffer may be larger).
  std::vector<uint8_t> frame(data, data + size);
  std::span<const uint8_t> f(frame.data(), frame.size());

  ParsedFrame p;
  auto bad = parse_frame(f, p);
  Reference ref = reference(f);
  FUZZ_CHECK(bad == ref.bad);
  // The receive path's straight-line reading of common frames takes only well-formed frames
  // and describes them exactly as the full parse does.
  RxFields common;
  const bool is_common = classify_common(f.data(), uint32_t(size), true, true, common);
  FUZZ_CHECK(!is_common || !bad);

  // The frame in several buffers (an XDP frame's first buffer and fragments, an mbuf chain):
  // only its first `head` bytes readable, in an exact-size copy so that ASan reports a read
  // past them, the length fields held against all `size`. Where a well-formed frame's headers
  // lie within the first buffer, the answer is the whole frame's.
  if (size > 1) {
    const size_t head = size - data[size - 1] % size;
    std::vector<uint8_t> first(data, data + head);
    ParsedFrame ph;
    auto bad_head = parse_frame({first.data(), first.size()}, ph, uint32_t(size));
    const size_t headers = size_t(p.l2_len) + p.l3_len + p.l4_len;
    if (!bad && p.eth_proto != VF_ETH_P_ARP && headers <= head) {
      FUZZ_CHECK(!bad_head);
      FUZZ_CHECK(ph.l2_len == p.l2_len && ph.l3_len == p.l3_len && ph.l4_len == p.l4_len);
      FUZZ_CHECK(ph.flags == p.flags && std::memcmp(&ph.key, &p.key, sizeof(p.key)) == 0);
    }
  }
  if (bad) {
    FUZZ_CHECK(is_malformed_reason(*bad));
    return 0;
  }
  if (is_common) {
    FUZZ_CHECK(common.packet_type == packet_type_of(p));
    FUZZ_CHECK(common.l2_len == p.l2_len && common.l3_len == p.l3_len);
    FUZZ_CHECK(common.hash == vf_flow_hash(&p.key, 1));
  }

  // Well-formed: what the parser describes lies within the frame and is what the bytes say.
  FUZZ_CHECK(p.l2_len == VF_ETH_HLEN + VF_VLAN_HLEN * p.vlan_count);
  FUZZ_CHECK(size_t(p.l2_len) + p.l3_len + p.l4_len <= size);
  FUZZ_CHECK(((p.flags & VF_PARSED_VLAN) != 0) == (p.vlan_count > 0));
  FUZZ_CHECK(!(p.flags & VF_PARSED_LATER_FRAG) || (p.flags & VF_PARSED_FRAGMENT));
  FUZZ_CHECK(!(p.flags & VF_PARSED_LATER_FRAG) || p.l4_len == 0);
  if (p.key.ip_version == 0) FUZZ_CHECK(p.l3_len == 0 && p.l4_len == 0);
  FUZZ_CHECK(p.l2_len == ref.p.l2_len && p.l3_len == ref.p.l3_len && p.l4_len == ref.p.l4_len);
  FUZZ_CHECK(p.vlan_count == ref.p.vlan_count && p.vlan_tci == ref.p.vlan_tci &&
             p.vlan_tci_inner == ref.p.vlan_tci_inner);
  FUZZ_CHECK(p.eth_proto == ref.p.eth_proto && p.flags == ref.p.flags);
  FUZZ_CHECK(std::memcmp(&p.key, &ref.p.key, sizeof(p.key)) == 0);

  // The packet type a DPDK port sets names the same L3 as the parse.
  uint32_t ptype = packet_type_of(p);
  if (p.key.ip_version == 4) FUZZ_CHECK(RTE_ETH_IS_IPV4_HDR(ptype));
  if (p.key.ip_version == 6) FUZZ_CHECK(RTE_ETH_IS_IPV6_HDR(ptype));
  if (p.key.ip_version == 0) FUZZ_CHECK(ptype == 0);

  // The symmetric flow id is the same in both directions of a flow.
  vf_flow_key back = p.key;
  std::memcpy(back.src, p.key.dst, sizeof(back.src));
  std::memcpy(back.dst, p.key.src, sizeof(back.dst));
  back.src_port = p.key.dst_port;
  back.dst_port = p.key.src_port;
  FUZZ_CHECK(vf_flow_hash(&p.key, 1) == vf_flow_hash(&back, 1));
  FUZZ_CHECK(vf_flow_hash(&p.key, 0) != 0);
  return 0;
}
