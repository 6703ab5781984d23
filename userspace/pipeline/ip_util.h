// Small header checks and rewrites the route and conntrack stages do per packet.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include <rte_ip.h>

namespace vecflow {

// An IPv4 fragment other than the first (a non-zero offset): it carries no L4 header.
inline bool later_fragment(const rte_ipv4_hdr* ip) noexcept {
  return (rte_be_to_cpu_16(ip->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) != 0;
}

// Decrements an IPv4 TTL and updates the header checksum incrementally, as Linux's
// ip_decrease_ttl does: the TTL is the high byte of its header word, so the word drops by
// 0x0100 and the checksum, its one's complement, grows by the same (in network order; here read
// as it sits in memory) with the end-around carry. Counting a sum of 0xffff as a carry too keeps
// the result canonical: a header whose checksum must be 0x0000 never gets the other zero,
// 0xffff. Two adds and a compare, where RFC 1624's general form (HC' = ~(~HC + ~m + m')) takes
// three complements and two folds. The caller checked that ttl > 1.
inline void ipv4_decrement_ttl(rte_ipv4_hdr* ip) noexcept {
  const uint32_t sum = uint32_t(ip->hdr_checksum) + rte_cpu_to_be_16(0x0100);
  ip->hdr_checksum = static_cast<uint16_t>(sum + (sum >= 0xffff));
  --ip->time_to_live;
}

// Whether an IPv4 header's checksum is right (RFC 1071): its 16-bit words, the checksum among
// them, add up to 0xffff in one's complement, that is, their plain sum is a non-zero multiple
// of 0xffff (an end-around carry adds 1 where the sum lost 0x10000, and 0x10000 = 0xffff + 1).
// The header is summed as 32-bit words, which changes nothing modulo 0xffff (a word hi·2^16 +
// lo is hi + lo there), nor does reading them in host order (a byte swap multiplies a 16-bit
// word by 2^8 modulo 0xffff, which has no common factor with it). Divisibility by a constant
// compiles to a multiplication and a comparison: five loads, four adds and those two for a
// header without options, instead of folding the sum to 16 bits. Its version field makes the
// sum non-zero; the parser checked that the IHL's words lie in the packet.
inline bool ipv4_checksum_ok(const rte_ipv4_hdr* ip) noexcept {
  // Each word loaded on its own: copied as an array, the header went through the stack.
  const auto word = [p = reinterpret_cast<const uint8_t*>(ip)](unsigned i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    return w;
  };
  const uint32_t first = word(0);
  uint64_t sum = uint64_t{first} + word(1) + word(2) + word(3) + word(4);
  // The IHL is the low nibble of the first byte, the first word's low byte in host order.
  static_assert(std::endian::native == std::endian::little);
  const unsigned words = first & 0x0f;
  for (unsigned i = 5; i < words; ++i)
    sum += word(i);
  return sum % 0xffff == 0;
}

}  // namespace vecflow
