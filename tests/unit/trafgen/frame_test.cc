// The generator's frames must be valid on the wire (checksums) after every per-packet stamp,
// or the path under test would drop them for the generator's fault; the receiver must read
// back the stamp the sender wrote, and report latency quantiles as precise as latency.h says.
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "frame.h"
#include "latency.h"

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
          EXPECT_EQ(uint64_t{p.tx_ns}, uint64_t{seq} * 0x100000001ull + 1);
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

// What the receiver does with a frame off its ring: the payload's stamp, subtracted from the
// slot's receive timestamp. The stamp must survive behind VLAN tags and in TCP and IPv6.
TEST(TrafgenLatency, ReceiveTimestampMinusTheFramesStamp) {
  const uint64_t tx = 1'765'000'000'123'456'789ull;  // CLOCK_REALTIME in 2025, in ns
  for (int version : {4, 6}) {
    for (bool tcp : {false, true}) {
      FlowFrame f = build_flow_frame(spec(version, tcp, 60), 3);
      stamp(f, f.bytes.data(), 41, tx);
      std::vector<uint8_t> tagged(f.bytes.begin(), f.bytes.begin() + 12);
      for (uint8_t b : {0x81, 0x00, 0x00, 0x05})  // 802.1Q, VLAN 5
        tagged.push_back(b);
      tagged.insert(tagged.end(), f.bytes.begin() + 12, f.bytes.end());
      for (const auto* frame : {&f.bytes, &tagged}) {
        PayloadHeader p;
        ASSERT_TRUE(read_payload(frame->data(), frame->size(), p));
        // Received 12.345 us later: tp_sec and tp_nsec as a TPACKET_V2 slot holds them.
        uint64_t rx = tx + 12'345;
        auto ns = one_way_ns(static_cast<uint32_t>(rx / 1'000'000'000ull),
                             static_cast<uint32_t>(rx % 1'000'000'000ull), p.tx_ns);
        ASSERT_TRUE(ns.has_value());
        EXPECT_EQ(*ns, 12'345u) << "v" << version << (tcp ? " tcp" : " udp");
      }
    }
  }
  // Across a second boundary, zero, and a stamp after the receive timestamp (a stepped clock).
  EXPECT_EQ(one_way_ns(11, 1'000, 10'999'999'000ull), 2'000u);
  EXPECT_EQ(one_way_ns(11, 0, 11'000'000'000ull), 0u);
  EXPECT_FALSE(one_way_ns(11, 0, 11'000'000'001ull).has_value());
}

TEST(TrafgenLatency, SenderStampIsTheReceiversClock) {
  // The sender's stamp and the kernel's receive timestamp are both CLOCK_REALTIME.
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t before = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  uint64_t stamp_ns = realtime_ns();
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t after = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  EXPECT_LE(before, stamp_ns);
  EXPECT_LE(stamp_ns, after);
}

TEST(TrafgenLatency, BucketsTileEveryValue) {
  using H = LatencyHistogram;
  EXPECT_EQ(H::bucket(0), 0u);
  EXPECT_EQ(H::bucket(UINT64_MAX), H::kBuckets - 1);
  for (unsigned b = 0; b < H::kBuckets; ++b) {
    // Each bucket starts where the one before ends, and holds its own bounds.
    EXPECT_EQ(H::bucket(H::lower(b)), b);
    EXPECT_EQ(H::bucket(H::lower(b) + (H::width(b) - 1)), b);
    if (b + 1 < H::kBuckets) {
      EXPECT_EQ(H::lower(b) + H::width(b), H::lower(b + 1));
    }
    // The precision latency.h states: half a width is at most 1/16 of the bucket's values.
    if (b >= H::kExact) {
      EXPECT_LE(H::width(b) / 2, H::lower(b) / 16);
    }
  }
}

// The nearest-rank quantile of the samples: the ceil(q * n)-th smallest.
uint64_t exact_quantile(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

TEST(TrafgenLatency, QuantilesWithinTheStatedPrecision) {
  std::mt19937_64 rng(36);
  std::lognormal_distribution<double> tail(std::log(8'000.0), 0.6);  // ~8 us, a long tail
  std::uniform_int_distribution<uint64_t> small(0, 40);
  std::vector<std::vector<uint64_t>> sets(4);
  for (int i = 0; i < 100'000; ++i)
    sets[0].push_back(static_cast<uint64_t>(tail(rng)));
  for (int i = 0; i < 5'000; ++i)
    sets[1].push_back(small(rng));  // the exact buckets and the first log ones
  for (int i = 0; i < 9'990; ++i)   // bimodal: 0.1 % outliers at 2 ms, just past p99.9
    sets[2].push_back(5'000 + (i % 7));
  for (int i = 0; i < 10; ++i)
    sets[2].push_back(2'000'000 + i);
  sets[3] = {123'456'789};
  for (const auto& v : sets) {
    LatencyHistogram h;
    for (uint64_t x : v)
      h.add(x);
    ASSERT_EQ(h.count(), v.size());
    EXPECT_EQ(h.min(), *std::min_element(v.begin(), v.end()));
    EXPECT_EQ(h.max(), *std::max_element(v.begin(), v.end()));
    for (double q : {0.001, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      uint64_t want = exact_quantile(v, q);
      uint64_t got = h.quantile(q);
      EXPECT_LE(got > want ? got - want : want - got, want / 16)
          << "q " << q << " of " << v.size() << " samples: " << got << " vs " << want;
    }
    EXPECT_EQ(h.quantile(1.0), h.max());
  }
  LatencyHistogram empty;
  EXPECT_EQ(empty.count(), 0u);
  EXPECT_EQ(empty.quantile(0.5), 0u);
  EXPECT_EQ(empty.max(), 0u);
}

TEST(TrafgenLatency, TheRareOutlierIsTheTailQuantile) {
  // 1 sample in 1000 at 1 ms: p99 does not see it, p99.9 does (nearest rank).
  LatencyHistogram h;
  for (int i = 0; i < 999; ++i)
    h.add(10'000);
  h.add(1'000'000);
  EXPECT_NEAR(double(h.quantile(0.99)), 10'000.0, 10'000.0 / 16);
  EXPECT_NEAR(double(h.quantile(0.999)), 10'000.0, 10'000.0 / 16);
  h.add(1'000'000);  // 2 in 1001: rank ceil(0.999 * 1001) = 1000 is an outlier
  EXPECT_NEAR(double(h.quantile(0.999)), 1'000'000.0, 1'000'000.0 / 16);
  EXPECT_EQ(h.max(), 1'000'000u);
}

}  // namespace
