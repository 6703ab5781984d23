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
