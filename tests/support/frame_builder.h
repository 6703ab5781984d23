// Builds Ethernet frames header by header for parser, XDP and port tests. Lengths (IPv4 total
// length, IPv6 payload length, UDP length) and next-header fields are filled in by build()
// from what was appended, unless a length was given (ip_length, udp_length: a fragment's UDP
// length counts the whole datagram, and a test may want a length that lies); a test that
// wants other lies changes the bytes afterwards (set16) or cuts the frame (build(size)).
#pragma once

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace vecflow::test {

using Bytes = std::vector<uint8_t>;

inline std::array<uint8_t, 4> ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {a, b, c, d};
}
// "2001:db8::1" -> 16 bytes; aborts the test binary on a typo in a literal.
inline std::array<uint8_t, 16> ip6(const char* text) {
  std::array<uint8_t, 16> a{};
  if (inet_pton(AF_INET6, text, a.data()) != 1) std::abort();
  return a;
}

class FrameBuilder {
 public:
  static constexpr size_t npos = ~size_t(0);

  FrameBuilder() {
    static const uint8_t kDst[6] = {0x02, 0, 0, 0, 0, 0x02};
    static const uint8_t kSrc[6] = {0x02, 0, 0, 0, 0, 0x01};
    b_.insert(b_.end(), kDst, kDst + 6);
    b_.insert(b_.end(), kSrc, kSrc + 6);
    type_at_ = b_.size();
    put16(0);
  }

  // A VLAN tag (TPID 0x8100 for 802.1Q, 0x88a8 for 802.1ad) after the current header.
  FrameBuilder& vlan(uint16_t tci, uint16_t tpid = 0x8100) {
    set16(type_at_, tpid);
    put16(tci);
    type_at_ = b_.size();
    put16(0);
    return *this;
  }
  FrameBuilder& ethertype(uint16_t type) {
    set16(type_at_, type);
    return *this;
  }
  // An ARP request (Ethernet/IPv4).
  FrameBuilder& arp() {
    ethertype(0x0806);
    const uint8_t hdr[8] = {0, 1, 8, 0, 6, 4, 0, 1};
    b_.insert(b_.end(), hdr, hdr + 8);
    b_.resize(b_.size() + 20, 0x11);
    return *this;
  }
  // IPv4 with `option_bytes` of options (a multiple of 4, NOPs), `frag` the flags/offset word.
  FrameBuilder& ipv4(std::array<uint8_t, 4> src, std::array<uint8_t, 4> dst, uint8_t proto,
                     size_t option_bytes = 0, uint16_t frag = 0) {
    ethertype(0x0800);
    l3_ = b_.size();
    v6_ = false;
    uint8_t hdr[20] = {};
    hdr[0] = uint8_t(0x40 | ((20 + option_bytes) / 4));
    hdr[6] = uint8_t(frag >> 8);
    hdr[7] = uint8_t(frag);
    hdr[8] = 64;
    hdr[9] = proto;
    std::memcpy(hdr + 12, src.data(), 4);
    std::memcpy(hdr + 16, dst.data(), 4);
    b_.insert(b_.end(), hdr, hdr + 20);
    b_.resize(b_.size() + option_bytes, 1);
    return *this;
  }
  // The IPv4 header's fragment fields, as a stack writes them into each fragment of one
  // datagram: identification, offset in 8-byte units, more-fragments flag.
  FrameBuilder& fragment4(uint16_t id, uint16_t offset, bool more) {
    set16(l3_ + 4, id);
    set16(l3_ + 6, uint16_t((more ? 0x2000 : 0) | (offset & 0x1fff)));
    return *this;
  }
  FrameBuilder& ipv6(std::array<uint8_t, 16> src, std::array<uint8_t, 16> dst, uint8_t next) {
    ethertype(0x86dd);
    l3_ = b_.size();
    v6_ = true;
    uint8_t hdr[40] = {0x60};
    hdr[6] = next;
    hdr[7] = 64;
    std::memcpy(hdr + 8, src.data(), 16);
    std::memcpy(hdr + 24, dst.data(), 16);
    b_.insert(b_.end(), hdr, hdr + 40);
    next_at_ = l3_ + 6;
    return *this;
  }
  // An IPv6 extension header of `type` (0, 43, 60: `bytes` a multiple of 8; 44: fragment
  // with `frag_offset` in 8-byte units; 51: AH, `bytes` a multiple of 4) whose next header
  // is `next`.
  FrameBuilder& ext6(uint8_t type, uint8_t next, size_t bytes = 8, uint16_t frag_offset = 0) {
    b_[next_at_] = type;
    size_t at = b_.size();
    b_.resize(at + bytes, 0);
    b_[at] = next;
    if (type == 51) {
      b_[at + 1] = uint8_t(bytes / 4 - 2);
    } else if (type == 44) {
      set16(at + 2, uint16_t(frag_offset << 3));
    } else {
      b_[at + 1] = uint8_t(bytes / 8 - 1);
    }
    next_at_ = at;
    return *this;
  }
  // An IPv6 fragment header (RFC 8200 §4.5) followed by `next`: identification, offset in
  // 8-byte units, M flag.
  FrameBuilder& fragment6(uint8_t next, uint32_t id, uint16_t offset, bool more) {
    ext6(44, next, 8, offset);
    if (more) b_[next_at_ + 3] |= 1;
    set16(next_at_ + 4, uint16_t(id >> 16));
    set16(next_at_ + 6, uint16_t(id));
    return *this;
  }
  FrameBuilder& tcp(uint16_t sport, uint16_t dport, size_t option_bytes = 0) {
    l4_ = b_.size();
    put16(sport);
    put16(dport);
    b_.resize(b_.size() + 8, 0);
    b_.push_back(uint8_t(((20 + option_bytes) / 4) << 4));
    b_.push_back(0x02);  // SYN
    put16(65535);
    b_.resize(b_.size() + 4 + option_bytes, 0);
    return *this;
  }
  FrameBuilder& udp(uint16_t sport, uint16_t dport) {
    l4_ = b_.size();
    udp_ = true;
    put16(sport);
    put16(dport);
    put16(0);
    put16(0);
    return *this;
  }
  // The UDP length field as given rather than the bytes after the header.
  FrameBuilder& udp_length(uint16_t len) {
    udp_length_ = len;
    return *this;
  }
  // The IPv4 total length or IPv6 payload length as given rather than what follows.
  FrameBuilder& ip_length(uint16_t len) {
    ip_length_ = len;
    return *this;
  }
  FrameBuilder& sctp(uint16_t sport, uint16_t dport) {
    l4_ = b_.size();
    put16(sport);
    put16(dport);
    b_.resize(b_.size() + 8, 0);
    return *this;
  }
  // ICMP echo request (type 8) or ICMPv6 echo request (128).
  FrameBuilder& icmp(uint8_t type = 8) {
    l4_ = b_.size();
    b_.push_back(type);
    b_.resize(b_.size() + 7, 0);
    return *this;
  }
  FrameBuilder& payload(size_t n, uint8_t fill = 0xab) {
    b_.resize(b_.size() + n, fill);
    return *this;
  }

  // Offsets of the headers, for tests that alter them.
  size_t l3() const { return l3_; }
  size_t l4() const { return l4_; }

  // The frame with its lengths filled in, padded to the 60-byte Ethernet minimum as a NIC
  // would (the padding is outside every IP length), then cut to `size` if given.
  Bytes build(size_t size = npos) const {
    Bytes out = b_;
    if (l3_ != npos) {
      size_t ip_total = out.size() - l3_;
      if (v6_) {
        set16(out, l3_ + 4, ip_length_.value_or(uint16_t(ip_total - 40)));
      } else {
        set16(out, l3_ + 2, ip_length_.value_or(uint16_t(ip_total)));
      }
    }
    if (udp_) set16(out, l4_ + 4, udp_length_.value_or(uint16_t(out.size() - l4_)));
    if (out.size() < 60) out.resize(60, 0);
    if (size != npos) out.resize(size);
    return out;
  }

  static void set16(Bytes& b, size_t at, uint16_t v) {
    b[at] = uint8_t(v >> 8);
    b[at + 1] = uint8_t(v);
  }

 private:
  void put16(uint16_t v) {
    b_.push_back(uint8_t(v >> 8));
    b_.push_back(uint8_t(v));
  }
  void set16(size_t at, uint16_t v) { set16(b_, at, v); }

  Bytes b_;
  size_t type_at_ = 0;
  size_t next_at_ = npos;
  size_t l3_ = npos;
  size_t l4_ = npos;
  bool v6_ = false;
  bool udp_ = false;
  std::optional<uint16_t> udp_length_;
  std::optional<uint16_t> ip_length_;
};

}  // namespace vecflow::test
