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

// Where a drop is counted: the XDP program, the device (NIC or AF_XDP socket), the port's rx
// path in user space, and user space after it (scheduler, pipeline, tx).
enum class DropLayer : uint8_t { Xdp, Device, Port, Userspace };
std::string_view drop_layer_name(DropLayer l) noexcept;

// Whether the code of `layer` counts drops under `r` anywhere (a malformed frame at the port
// but not a no_route; an rx_missed at the device only). Metrics give a series only to these
// pairs, and to any other that counted something, so that nothing counted is hidden.
bool drop_possible(DropLayer layer, DropReason r) noexcept;
// Whether `r` is a fault of the frame found by the parser (XDP's and the ports' alike).
bool is_parse_fault(DropReason r) noexcept;

// Every reason as an aligned Markdown table (index, name, meaning), the operator's list:
// `vecflowd --list-drop-reasons` prints it and docs/drop-reasons.md carries it (a test keeps them
// equal). The index is the slot in the XDP programs' counter arrays, for reading them with bpftool.
std::string drop_reasons_markdown();

}  // namespace vecflow
