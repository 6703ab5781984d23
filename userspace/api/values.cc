#include "api/values.h"

#include <netinet/in.h>

#include "runtime/cycles.h"

namespace vecflow::control {

Json tsc_percent(std::optional<double> cycles_per_s) {
  uint64_t hz = tsc_hz();
  if (!cycles_per_s || hz == 0) return nullptr;
  return *cycles_per_s * 100.0 / static_cast<double>(hz);
}

std::string proto_name(uint8_t proto) {
  switch (proto) {
    case IPPROTO_TCP:
      return "tcp";
    case IPPROTO_UDP:
      return "udp";
    case IPPROTO_ICMP:
      return "icmp";
    case IPPROTO_ICMPV6:
      return "icmpv6";
    case IPPROTO_SCTP:
      return "sctp";
    default:
      return std::to_string(proto);
  }
}

}  // namespace vecflow::control
