// Small header rewrites the route stage does per packet.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include <rte_ip.h>

namespace vecflow {

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

}  // namespace vecflow
