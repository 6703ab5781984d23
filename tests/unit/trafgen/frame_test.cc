// The generator's frames must be valid on the wire (checksums) after every per-packet stamp,
// or the path under test would drop them for the generator's fault.
#include <netinet/in.h>

#include <gtest/gtest.h>

#include "frame.h"

using namespace vecflow;
using namespace vecflow::trafgen;

namespace {

uint32_t sum16(const uint8_t* p, size_t len, uint32_t acc = 0) {
  for (size_t i = 0; i + 1 < len; i += 2)
    acc += uint32_t(p[i]) << 8 | p[i + 1];
  if (len & 1) acc += uint32_t(p[len - 1]) << 8;
  return acc;
}

uint16_t fold(uint32_t acc) {
  while (acc >> 16)
    acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

// True when the L4 checksum (with the pseudo header) verifies, as a receiver checks it.
bool l4_checksum_ok(const std::vector<uint8_t>& f, bool v4, uint8_t proto) {
  const uint8_t* l3 = f.data() + 14;
  size_t l3_len = v4 ? 20 : 40;
  size_t l4_len = f.size() - 14 - l3_len;
  uint32_t acc = v4 ? sum16(l3 + 12, 8) : sum16(l3 + 8, 32);
  acc += proto + static_cast<uint32_t>(l4_len);
  acc = sum16(l3 + l3_len, l4_len, acc);
  return fold(acc) == 0xffff;
}

FrameSpec spec(int version, bool tcp, size_t size) {
  FrameSpec s;
  s.src_mac = *parse_mac_address("02:00:00:00:00:01");
  s.dst_mac = *parse_mac_address("02:00:00:00:00:02");
  s.src_ip = *parse_ip_address(version == 4 ? "192.0.2.2" : "2001:db8:1::2");
  s.dst_ip = *parse_ip_address(version == 4 ? "198.51.100.2" : "2001:db8:2::2");
  s.tcp = tcp;
  s.frame_size = size;
  return s;
}

TEST(TrafgenFrame, ChecksumsHoldAfterEveryStamp) {
  for (int version : {4, 6}) {
    for (bool tcp : {false, true}) {
      for (size_t size : {size_t{60}, size_t{1514}}) {
        auto s = spec(version, tcp, size);
        FlowFrame f = build_flow_frame(s, 7);
        ASSERT_EQ(f.bytes.size(), std::max(size, min_frame_size(s)));
        if (version == 4) {
          EXPECT_EQ(fold(sum16(f.bytes.data() + 14, 20)), 0xffff);
        }
        uint8_t proto = tcp ? IPPROTO_TCP : IPPROTO_UDP;
        bool checked = f.checksum_offset != 0;
        EXPECT_EQ(checked, tcp || version == 6);
        for (uint32_t seq : {0u, 1u, 0xffffu, 0x12345678u, ~0u}) {
          stamp(f, f.bytes.data(), seq, uint64_t{seq} * 0x100000001ull + 1);
          if (checked) {
            EXPECT_TRUE(l4_checksum_ok(f.bytes, version == 4, proto))
                << "v" << version << (tcp ? " tcp " : " udp ") << size << " seq " << seq;
          }
          PayloadHeader p;
          ASSERT_TRUE(read_payload(f.bytes.data(), f.bytes.size(), p));
          EXPECT_EQ(uint32_t{p.flow}, 7u);  // copied: the header is packed
          EXPECT_EQ(decltype(seq){p.seq}, seq);
        }
      }
    }
  }
}

TEST(TrafgenFrame, FlowsDifferInTheirFiveTuple) {
  auto s = spec(4, false, 60);
  auto a = build_flow_frame(s, 0);
  auto b = build_flow_frame(s, 1);
  auto c = build_flow_frame(s, 60000);
  EXPECT_NE(a.bytes, b.bytes);          // source port
  EXPECT_EQ(c.bytes[34], a.bytes[34]);  // same source port as flow 0 ...
  EXPECT_NE(c.bytes[29], a.bytes[29]);  // ... but another source address
}

TEST(TrafgenFrame, ForeignFramesAreNotOurs) {
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  PayloadHeader p;
  EXPECT_FALSE(read_payload(arp.data(), arp.size(), p));
  auto f = build_flow_frame(spec(4, false, 60), 0);
  f.bytes[f.payload_offset] ^= 1;  // magic broken
  EXPECT_FALSE(read_payload(f.bytes.data(), f.bytes.size(), p));
  EXPECT_FALSE(read_payload(f.bytes.data(), 30, p));  // truncated
}

}  // namespace
