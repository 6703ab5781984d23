#include "core/drop_reason.h"

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

}  // namespace vecflow
