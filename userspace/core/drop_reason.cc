#include "core/drop_reason.h"

#include <algorithm>

#include <fmt/format.h>

namespace vecflow {
namespace {

struct ReasonInfo {
  std::string_view name;
  std::string_view text;
};

constexpr std::array<ReasonInfo, kDropReasonCount> kReasons = {{
#define VF_DROP_INFO(name, wire, text) {wire, text},
    VF_DROP_REASONS(VF_DROP_INFO)
#undef VF_DROP_INFO
}};

}  // namespace

std::string_view drop_reason_name(DropReason r) noexcept {
  auto i = static_cast<size_t>(r);
  return i < kReasons.size() ? kReasons[i].name : std::string_view("invalid");
}

std::string_view drop_reason_text(DropReason r) noexcept {
  auto i = static_cast<size_t>(r);
  return i < kReasons.size() ? kReasons[i].text : std::string_view("invalid drop reason");
}

std::optional<DropReason> drop_reason_from_name(std::string_view name) noexcept {
  for (size_t i = 0; i < kReasons.size(); ++i) {
    if (kReasons[i].name == name) return static_cast<DropReason>(i);
  }
  return std::nullopt;
}

std::string_view drop_layer_name(DropLayer l) noexcept {
  switch (l) {
    case DropLayer::Xdp:
      return "xdp";
    case DropLayer::Device:
      return "device";
    case DropLayer::Port:
      return "port";
    case DropLayer::Userspace:
      return "userspace";
  }
  return "invalid";
}

bool is_parse_fault(DropReason r) noexcept {
  using enum DropReason;
  switch (r) {
    case L2_TRUNCATED:
    case VLAN_TRUNCATED:
    case VLAN_TOO_DEEP:
    case ARP_TRUNCATED:
    case IPV4_TRUNCATED:
    case IPV4_BAD_VERSION:
    case IPV4_BAD_IHL:
    case IPV4_BAD_LEN:
    case IPV6_TRUNCATED:
    case IPV6_BAD_LEN:
    case IPV6_BAD_VERSION:
    case IPV6_EXT_TRUNCATED:
    case IPV6_EXT_TOO_LONG:
    case TCP_TRUNCATED:
    case TCP_BAD_DOFF:
    case UDP_TRUNCATED:
    case UDP_BAD_LEN:
    case ICMP_TRUNCATED:
    case SCTP_TRUNCATED:
      return true;
    default:
      return false;
  }
}

bool drop_possible(DropLayer layer, DropReason r) noexcept {
  using enum DropReason;
  switch (layer) {
    case DropLayer::Xdp:  // steer.bpf.c
      return is_parse_fault(r) || r == STEER_RULE || r == NO_XSK || r == REDIRECT_FAILED ||
             r == QUEUE_NOT_READ;
    case DropLayer::Device:  // the ethdev's stats, the AF_XDP socket's statistics
      return r == RX_MISSED || r == RX_ERROR || r == TX_ERROR || r == NOMBUF ||
             r == XSK_RING_FULL || r == FRAME_TOO_BIG;
    case DropLayer::Port:  // the ports' rx parse
      return is_parse_fault(r);
    case DropLayer::Userspace:  // rx adapter, stages, tx adapter
      return !is_parse_fault(r) && r != STEER_RULE && r != NO_XSK && r != REDIRECT_FAILED &&
             r != QUEUE_NOT_READ && r != RX_MISSED && r != RX_ERROR && r != TX_ERROR &&
             r != XSK_RING_FULL && r != FRAME_TOO_BIG;
  }
  return false;
}

std::string drop_reasons_markdown() {
  size_t name_w = std::string_view("reason").size() + 2, text_w = 0;
  for (const auto& r : kReasons) {
    name_w = std::max(name_w, r.name.size() + 2);  // + backquotes
    text_w = std::max(text_w, r.text.size());
  }
  std::string s = fmt::format("| #  | {:<{}} | {:<{}} |\n", "reason", name_w, "meaning", text_w);
  s += fmt::format("|----|{:-<{}}|{:-<{}}|\n", "", name_w + 2, "", text_w + 2);
  for (size_t i = 0; i < kReasons.size(); ++i) {
    s += fmt::format("| {:<2} | {:<{}} | {:<{}} |\n", i, fmt::format("`{}`", kReasons[i].name),
                     name_w, kReasons[i].text, text_w);
  }
  return s;
}

}  // namespace vecflow
