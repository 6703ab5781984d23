#include "frame.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace vecflow::trafgen {
namespace {

constexpr size_t kEth = 14;
constexpr size_t kIpv4 = 20;
constexpr size_t kIpv6 = 40;
constexpr size_t kUdp = 8;
constexpr size_t kTcp = 20;

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

uint32_t sum16(const uint8_t* p, size_t len, uint32_t acc) {
  for (size_t i = 0; i + 1 < len; i += 2)
    acc += get16(p + i);
  if (len & 1) acc += static_cast<uint32_t>(p[len - 1]) << 8;
  return acc;
}

uint16_t fold(uint32_t acc) {
  while (acc >> 16)
    acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(~acc);
}

}  // namespace

size_t min_frame_size(const FrameSpec& spec) {
  return kEth + (spec.src_ip.version == 4 ? kIpv4 : kIpv6) + (spec.tcp ? kTcp : kUdp) +
         sizeof(PayloadHeader);
}

FlowFrame build_flow_frame(const FrameSpec& spec, uint32_t flow) {
  FlowFrame f;
  size_t size = std::max(spec.frame_size, min_frame_size(spec));
  f.bytes.assign(size, 0);
  uint8_t* p = f.bytes.data();
  std::memcpy(p, spec.dst_mac.bytes.data(), 6);
  std::memcpy(p + 6, spec.src_mac.bytes.data(), 6);
  bool v4 = spec.src_ip.version == 4;
  put16(p + 12, v4 ? 0x0800 : 0x86dd);

  IpAddress src = spec.src_ip;
  uint32_t spread = flow / 60000;  // flows beyond the port range vary the source address
  src.bytes[v4 ? 3 : 15] = static_cast<uint8_t>(src.bytes[v4 ? 3 : 15] + (spread & 0xff));
  src.bytes[v4 ? 2 : 14] = static_cast<uint8_t>(src.bytes[v4 ? 2 : 14] + ((spread >> 8) & 0xff));
  uint16_t sport = static_cast<uint16_t>(spec.src_port + flow % 60000);

  uint8_t* l3 = p + kEth;
  size_t l3_len = v4 ? kIpv4 : kIpv6;
  uint8_t* l4 = l3 + l3_len;
  size_t l4_total = size - kEth - l3_len;
  uint8_t proto = spec.tcp ? IPPROTO_TCP : IPPROTO_UDP;
  if (v4) {
    l3[0] = 0x45;
    put16(l3 + 2, static_cast<uint16_t>(l3_len + l4_total));
    l3[6] = 0x40;  // don't fragment
    l3[8] = 64;
    l3[9] = proto;
    std::memcpy(l3 + 12, src.bytes.data(), 4);
    std::memcpy(l3 + 16, spec.dst_ip.bytes.data(), 4);
    put16(l3 + 10, fold(sum16(l3, kIpv4, 0)));
  } else {
    l3[0] = 0x60;
    put16(l3 + 4, static_cast<uint16_t>(l4_total));
    l3[6] = proto;
    l3[7] = 64;
    std::memcpy(l3 + 8, src.bytes.data(), 16);
    std::memcpy(l3 + 24, spec.dst_ip.bytes.data(), 16);
  }
  put16(l4, sport);
  put16(l4 + 2, spec.dst_port);
  size_t hdr;
  if (spec.tcp) {
    l4[12] = 5 << 4;
    l4[13] = spec.tcp_flags;
    put16(l4 + 14, 65535);
    hdr = kTcp;
    f.checksum_offset = static_cast<size_t>(l4 + 16 - p);
  } else {
    put16(l4 + 4, static_cast<uint16_t>(l4_total));
    hdr = kUdp;
    // IPv4 UDP may leave the checksum zero; IPv6 UDP must carry one.
    f.checksum_offset = v4 ? 0 : static_cast<size_t>(l4 + 6 - p);
  }
  f.payload_offset = static_cast<size_t>(l4 + hdr - p);
  PayloadHeader ph{kMagic, flow, 0, 0};
  std::memcpy(p + f.payload_offset, &ph, sizeof(ph));
  // Fill the rest of the payload with a pattern so frames are not all zeros.
  for (size_t i = f.payload_offset + sizeof(ph); i < size; ++i)
    p[i] = static_cast<uint8_t>(i);

  if (f.checksum_offset != 0) {
    uint32_t acc = 0;
    if (v4) {
      acc = sum16(l3 + 12, 8, acc);
    } else {
      acc = sum16(l3 + 8, 32, acc);
    }
    acc += proto;
    acc += static_cast<uint32_t>(l4_total);
    acc = sum16(l4, l4_total, acc);
    uint16_t c = fold(acc);
    if (!spec.tcp && c == 0) c = 0xffff;  // UDP: 0 means "no checksum"
    put16(p + f.checksum_offset, c);
  }
  return f;
}

void stamp(FlowFrame& f, uint8_t* frame, uint32_t seq, uint64_t tx_ns) {
  // seq and tx_ns are the last 12 bytes of the header, at an even offset from the L4 header.
  uint8_t* ph = frame + f.payload_offset + offsetof(PayloadHeader, seq);
  uint8_t fresh[12];
  std::memcpy(fresh, &seq, 4);
  std::memcpy(fresh + 4, &tx_ns, 8);
  if (f.checksum_offset == 0) {
    std::memcpy(ph, fresh, sizeof(fresh));
    return;
  }
  // RFC 1624: HC' = ~(~HC + ~m + m') over each changed 16-bit word. The payload header starts
  // at an even offset from the L4 header, so its words align with the checksum's words.
  uint32_t acc = static_cast<uint16_t>(~get16(frame + f.checksum_offset));
  for (size_t i = 0; i < sizeof(fresh); i += 2) {
    acc += static_cast<uint16_t>(~get16(ph + i));
    acc += get16(fresh + i);
  }
  std::memcpy(ph, fresh, sizeof(fresh));
  uint16_t c = fold(acc);
  put16(frame + f.checksum_offset, c == 0 ? 0xffff : c);
}

bool read_payload(const uint8_t* frame, size_t len, PayloadHeader& out) {
  if (len < kEth) return false;
  size_t off = 12;
  uint16_t type = get16(frame + off);
  while ((type == 0x8100 || type == 0x88a8) && off + 6 <= len) {
    off += 4;
    type = get16(frame + off);
  }
  off += 2;
  uint8_t proto;
  if (type == 0x0800) {
    if (off + kIpv4 > len) return false;
    proto = frame[off + 9];
    off += static_cast<size_t>(frame[off] & 0x0f) * 4;
  } else if (type == 0x86dd) {
    if (off + kIpv6 > len) return false;
    proto = frame[off + 6];
    off += kIpv6;
  } else {
    return false;
  }
  if (proto == IPPROTO_UDP) {
    off += kUdp;
  } else if (proto == IPPROTO_TCP) {
    if (off + kTcp > len) return false;
    off += static_cast<size_t>(frame[off + 12] >> 4) * 4;
  } else {
    return false;
  }
  if (off + sizeof(PayloadHeader) > len) return false;
  std::memcpy(&out, frame + off, sizeof(out));  // frames give no alignment guarantee
  return out.magic == kMagic;
}

}  // namespace vecflow::trafgen
