// Values of command results derived from the rate window: a rate, bits per second, or the share
// of wall time a cycle counter advanced. Each is JSON null until two samples exist (or after a
// counter reset), which vecflowctl prints as "-": an unknown rate is not a zero rate. And the
// names results give packet fields (an IP protocol).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "api/command.h"
#include "api/metrics.h"

namespace vecflow::control {

inline Json number_or_null(std::optional<double> v) {
  return v ? Json(*v) : Json(nullptr);
}

// A byte rate as bits per second (vecflowctl's Unit::Bps).
inline Json bits_or_null(std::optional<double> bytes_per_s) {
  return bytes_per_s ? Json(*bytes_per_s * 8) : Json(nullptr);
}

// Percentage of wall time a TSC cycle counter advanced over the last sampling interval:
// `cycles_per_s` is the counter's rate (RateWindow::rate or rate_sum).
Json tsc_percent(std::optional<double> cycles_per_s);

// "tcp", "udp", "icmp", "icmpv6", "sctp", else the number.
std::string proto_name(uint8_t proto);

}  // namespace vecflow::control
