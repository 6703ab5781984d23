#include "core/net.h"

#include <arpa/inet.h>

#include <charconv>

#include <fmt/format.h>

namespace vecflow {

std::string IpAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(version == 4 ? AF_INET : AF_INET6, bytes.data(), buf, sizeof(buf));
  return buf;
}

bool IpPrefix::contains(const IpAddress& a) const noexcept {
  if (a.version != addr.version) return false;
  unsigned full = length / 8;
  for (unsigned i = 0; i < full; ++i) {
    if (a.bytes[i] != addr.bytes[i]) return false;
  }
  unsigned rest = length % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a.bytes[full] & mask) == (addr.bytes[full] & mask);
}

std::string IpPrefix::to_string() const {
  return fmt::format("{}/{}", addr.to_string(), length);
}

std::string MacAddress::to_string() const {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", bytes[0], bytes[1], bytes[2],
                     bytes[3], bytes[4], bytes[5]);
}

std::optional<IpAddress> parse_ip_address(std::string_view text) {
  std::string s(text);
  IpAddress a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) {
    a.version = 4;
    return a;
  }
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) {
    a.version = 6;
    return a;
  }
  return std::nullopt;
}

std::optional<IpPrefix> parse_ip_prefix(std::string_view text, std::string* why) {
  auto slash = text.find('/');
  auto addr = parse_ip_address(text.substr(0, slash));
  if (!addr) {
    if (why) *why = "not an IPv4 or IPv6 address";
    return std::nullopt;
  }
  unsigned max_len = addr->version == 4 ? 32 : 128;
  unsigned len = max_len;
  if (slash != std::string_view::npos) {
    auto digits = text.substr(slash + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
        len > max_len) {
      if (why) *why = fmt::format("prefix length must be 0..{}", max_len);
      return std::nullopt;
    }
  }
  IpPrefix p{*addr, static_cast<uint8_t>(len)};
  IpPrefix masked = p;
  for (unsigned bit = len; bit < max_len; ++bit) {
    masked.addr.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  }
  if (masked.addr != p.addr) {
    if (why)
      *why = fmt::format("host bits set past /{} (did you mean {}?)", len, masked.to_string());
    return std::nullopt;
  }
  return p;
}

std::optional<MacAddress> parse_mac_address(std::string_view text) {
  MacAddress m;
  if (text.size() != 17) return std::nullopt;
  for (size_t i = 0; i < 6; ++i) {
    auto part = text.substr(i * 3, 2);
    if (i < 5 && text[i * 3 + 2] != ':' && text[i * 3 + 2] != '-') return std::nullopt;
    auto [end, ec] = std::from_chars(part.data(), part.data() + 2, m.bytes[i], 16);
    if (ec != std::errc() || end != part.data() + 2) return std::nullopt;
  }
  return m;
}

}  // namespace vecflow
