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

// Decrements an IPv4 TTL and updates the header checksum incrementally (RFC 1624, eqn. 3:
// HC' = ~(~HC + ~m + m')), without summing the header again. The one's-complement sum does not
// depend on byte order as long as every word is read the same way, so the words are used as
// they sit in memory. The caller checked that ttl > 1.
inline void ipv4_decrement_ttl(rte_ipv4_hdr* ip) noexcept {
  // TTL and protocol as one 16-bit word, read and written whole: storing the TTL byte and
  // reading the word back would stall on the store. TTL is the word's first byte in memory,
  // its low byte in host (little-endian) order; it is above 1, so no borrow reaches the
  // protocol byte.
  static_assert(std::endian::native == std::endian::little);
  uint16_t old_word;
  std::memcpy(&old_word, &ip->time_to_live, 2);
  const uint16_t new_word = static_cast<uint16_t>(old_word - 1);
  std::memcpy(&ip->time_to_live, &new_word, 2);
  uint32_t sum = uint32_t(uint16_t(~ip->hdr_checksum)) + uint16_t(~old_word) + new_word;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  ip->hdr_checksum = static_cast<uint16_t>(~sum);
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
