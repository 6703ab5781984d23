// TCP as the conntrack stage tracks it: a segment's fields, the flag combinations a segment may
// carry, and the window bounds of "Real Stateful TCP Packet Filtering" (G. van Rooij), which
// Linux's nf_conntrack_proto_tcp applies too. Part of the conntrack stage; inline because every
// TCP packet of a tracked connection passes through them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <rte_byteorder.h>

#include "pipeline/conntrack/conntrack_table.h"

namespace vecflow::tcp {

inline constexpr uint8_t kTcpFin = 0x01;
inline constexpr uint8_t kTcpSyn = 0x02;
inline constexpr uint8_t kTcpRst = 0x04;
inline constexpr uint8_t kTcpAck = 0x10;

inline uint32_t be32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return rte_be_to_cpu_32(v);
}

inline uint16_t be16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

// Sequence-space comparisons (RFC 793 arithmetic modulo 2^32).
inline bool before(uint32_t a, uint32_t b) noexcept {
  return static_cast<int32_t>(a - b) < 0;
}

inline bool after(uint32_t a, uint32_t b) noexcept {
  return before(b, a);
}

// The window scale a SYN offers (RFC 7323 §2), or -1. The parser checked that the options lie
// in the frame (doff within the segment).
inline int window_scale(const uint8_t* tcp, uint32_t doff) noexcept {
  uint32_t i = 20;
  while (i < doff) {
    const uint8_t kind = tcp[i];
    if (kind == 0) break;  // end of options
    if (kind == 1) {       // no-op
      ++i;
      continue;
    }
    if (i + 1 >= doff) break;
    const uint8_t len = tcp[i + 1];
    if (len < 2 || i + len > doff) break;
    if (kind == 3 && len == 3) return std::min<int>(tcp[i + 2], 14);
    i += len;
  }
  return -1;
}

// A TCP segment as the tracker reads it.
struct Segment {
  uint8_t flags;  // FIN, SYN, RST, ACK
  uint32_t seq, ack, end;
  uint32_t win;  // unscaled
  int wscale;    // offered in a SYN, else -1
};

inline bool valid_flags(uint8_t f) noexcept {
  switch (f) {
    case kTcpSyn:
    case kTcpSyn | kTcpAck:
    case kTcpRst:
    case kTcpRst | kTcpAck:
    case kTcpFin | kTcpAck:
    case kTcpAck:
      return true;
    default:
      return false;
  }
}

// The four bounds of "Real Stateful TCP Packet Filtering" on a segment from `s` to `r`, then
// the update of both directions' windows. `swin`: the sender's window, scaled.
inline bool in_window(TcpWindow& s, TcpWindow& r, const Segment& g, uint32_t swin) noexcept {
  const uint32_t ack = (g.flags & kTcpAck) ? g.ack : r.end;
  const uint32_t maxack = std::max<uint32_t>(s.maxwin, 66000);
  const bool ok = before(g.seq, s.maxend + 1) && after(g.end, s.end - r.maxwin - 1) &&
                  before(ack, r.end + 1) && after(ack, r.end - maxack - 1);
  if (!ok) return false;
  if (s.maxwin < swin) s.maxwin = swin;
  if (after(g.end, s.end)) s.end = g.end;
  if (g.flags & kTcpAck) {
    if (after(ack + swin, r.maxend)) r.maxend = ack + swin;
  }
  return true;
}

// A TCP segment's fields; `l4_room`: the bytes of the IP payload. The parser guarantees the
// whole header, options included, in the first segment.
inline Segment segment_of(const uint8_t* l4, uint32_t l4_room) noexcept {
  const uint32_t doff = uint32_t(l4[12] >> 4) * 4;
  Segment g;
  g.flags = l4[13] & (kTcpFin | kTcpSyn | kTcpRst | kTcpAck);
  g.seq = be32(l4 + 4);
  g.ack = be32(l4 + 8);
  g.win = be16(l4 + 14);
  g.end = g.seq + (l4_room - doff) + ((g.flags & kTcpSyn) ? 1 : 0) + ((g.flags & kTcpFin) ? 1 : 0);
  g.wscale = (g.flags & kTcpSyn) ? window_scale(l4, doff) : -1;
  return g;
}

// Whether an ACK, FIN or RST segment of `e` in direction `dir` is acceptable (then both
// directions' windows are updated): always on a connection picked up mid-stream, and before
// the other side announced a window.
inline bool segment_accepted(ConnEntry& e, unsigned dir, const Segment& g) noexcept {
  const bool scaled = (e.flags & kConnWscaleOrig) && (e.flags & kConnWscaleReply);
  const uint32_t swin = g.win << (scaled ? e.wscale[dir] : 0);
  TcpWindow& r = e.tcp[dir ^ 1];
  return (e.flags & kConnLiberal) || r.maxwin == 0 || in_window(e.tcp[dir], r, g, swin);
}

}  // namespace vecflow::tcp
