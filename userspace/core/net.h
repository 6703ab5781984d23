// Addresses and prefixes as the control plane handles them (configuration, tables, status).
// The data path works on raw header bytes; these types are for building its tables.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vecflow {

struct IpAddress {
  uint8_t version = 4;              // 4 or 6
  std::array<uint8_t, 16> bytes{};  // network order; IPv4 uses bytes[0..3]

  bool operator==(const IpAddress&) const = default;
  std::string to_string() const;
  // IPv4 address as a host-order integer (for rte_lpm and friends).
  uint32_t v4_host() const noexcept {
    return uint32_t(bytes[0]) << 24 | uint32_t(bytes[1]) << 16 | uint32_t(bytes[2]) << 8 | bytes[3];
  }
};

struct IpPrefix {
  IpAddress addr;
  uint8_t length = 0;

  bool operator==(const IpPrefix&) const = default;
  bool contains(const IpAddress& a) const noexcept;
  std::string to_string() const;
};

struct MacAddress {
  std::array<uint8_t, 6> bytes{};
  bool operator==(const MacAddress&) const = default;
  std::string to_string() const;
};

// Parsers return a message on failure, suitable for a located configuration error.
std::optional<IpAddress> parse_ip_address(std::string_view text);
// "10.0.0.0/8", "2001:db8::/32"; a bare address is a host prefix (/32, /128). Host bits set
// past the length are an error (`why` says so and gives the corrected prefix).
std::optional<IpPrefix> parse_ip_prefix(std::string_view text, std::string* why = nullptr);
std::optional<MacAddress> parse_mac_address(std::string_view text);

}  // namespace vecflow
