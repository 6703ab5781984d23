// The closed list of drop reasons, as a C++ enum over the C ABI list in
// bpf/include/vecflow/drop_reasons.h that the XDP program uses too.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "vecflow/drop_reasons.h"

namespace vecflow {

enum class DropReason : uint16_t {
#define VF_DROP_CXX(name, wire, text) name = VF_DROP_##name,
  VF_DROP_REASONS(VF_DROP_CXX)
#undef VF_DROP_CXX
};

inline constexpr size_t kDropReasonCount = VF_DROP_REASON_COUNT;

// The wire name ("ipv4_bad_ihl"), used in the control protocol, metrics and logs.
std::string_view drop_reason_name(DropReason r) noexcept;
// One line an operator can read.
std::string_view drop_reason_text(DropReason r) noexcept;
std::optional<DropReason> drop_reason_from_name(std::string_view name) noexcept;

// Every reason as an aligned Markdown table (index, name, meaning), the operator's list:
// `vecflowd --list-drop-reasons` prints it and README.md carries it (a test keeps them equal).
// The index is the slot in the XDP programs' counter arrays, for reading them with bpftool.
std::string drop_reasons_markdown();

}  // namespace vecflow
