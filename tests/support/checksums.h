// Internet checksums computed from scratch over a frame (untagged Ethernet, IPv4 or IPv6
// without extension headers, TCP or UDP), for tests of code that updates them incrementally.
#pragma once

#include <cstddef>
#include <cstdint>

#include "support/frame_builder.h"

namespace vecflow::test {

inline uint32_t sum16(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2)
    s += uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) s += uint32_t(p[n - 1]) << 8;
  return s;
}

inline uint16_t fold_not(uint32_t s) {
  while (s >> 16)
    s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}

struct L4Span {
  size_t l3 = 14, l4 = 0, len = 0;
  bool v6 = false;
  uint8_t proto = 0;
};

inline L4Span l4_span(const Bytes& f) {
  L4Span s;
  s.v6 = (f[s.l3] >> 4) == 6;
  if (s.v6) {
    s.l4 = s.l3 + 40;
    s.len = size_t(f[s.l3 + 4]) << 8 | f[s.l3 + 5];
    s.proto = f[s.l3 + 6];
  } else {
    s.l4 = s.l3 + (f[s.l3] & 0x0f) * 4u;
    s.len = (size_t(f[s.l3 + 2]) << 8 | f[s.l3 + 3]) - (s.l4 - s.l3);
    s.proto = f[s.l3 + 9];
  }
  return s;
}

// The L4 checksum's sum over the pseudo-header and the segment as it is.
inline uint32_t l4_sum(const Bytes& f, const L4Span& s) {
  uint32_t sum = s.v6 ? sum16(&f[s.l3 + 8], 32) : sum16(&f[s.l3 + 12], 8);
  sum += uint32_t(s.len) + s.proto;
  return sum16(&f[s.l4], s.len, sum);
}

inline size_t l4_checksum_at(const L4Span& s) {
  return s.l4 + (s.proto == 6 ? 16 : 6);
}

// Fills the IPv4 header checksum and the TCP/UDP checksum.
inline void fill_checksums(Bytes& f) {
  L4Span s = l4_span(f);
  if (!s.v6) {
    f[s.l3 + 10] = f[s.l3 + 11] = 0;
    FrameBuilder::set16(f, s.l3 + 10, fold_not(sum16(&f[s.l3], s.l4 - s.l3)));
  }
  if (s.proto != 6 && s.proto != 17) return;
  const size_t at = l4_checksum_at(s);
  f[at] = f[at + 1] = 0;
  uint16_t c = fold_not(l4_sum(f, s));
  if (c == 0 && s.proto == 17) c = 0xffff;
  FrameBuilder::set16(f, at, c);
}

inline bool ipv4_checksum_ok(const Bytes& f) {
  const size_t l3 = 14;
  return fold_not(sum16(&f[l3], (f[l3] & 0x0f) * 4u)) == 0;
}

inline bool l4_checksum_ok(const Bytes& f) {
  L4Span s = l4_span(f);
  return fold_not(l4_sum(f, s)) == 0;
}

}  // namespace vecflow::test
