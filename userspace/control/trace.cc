#include "control/trace.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <rte_bpf.h>
#include <rte_eventdev.h>

#include "control/capture.h"
#include "control/command_specs.h"
#include "core/drop_reason.h"
#include "core/packet.h"
#include "runtime/cycles.h"

namespace vecflow::control {
namespace {

uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

std::string ip4(const uint8_t* p) {
  return fmt::format("{}.{}.{}.{}", p[0], p[1], p[2], p[3]);
}

std::string ip6(const uint8_t* p) {
  IpAddress a;
  a.version = 6;
  std::copy(p, p + 16, a.bytes.begin());
  return a.to_string();
}

std::string name_of(const std::vector<std::string>& names, size_t i, std::string_view what) {
  return i < names.size() ? names[i] : fmt::format("{} {}", what, i);
}

std::string_view verdict_word(uint8_t v) {
  switch (static_cast<Verdict>(v)) {
    case Verdict::Continue:
      return "continue";
    case Verdict::Transmit:
      return "transmit";
    case Verdict::Kernel:
      return "to kernel";
    case Verdict::Drop:
      return "drop";
    case Verdict::Held:
      return "held";
  }
  return "?";
}

std::string_view sched_word(uint32_t t) {
  switch (t) {
    case RTE_SCHED_TYPE_ORDERED:
      return "ordered";
    case RTE_SCHED_TYPE_ATOMIC:
      return "atomic";
    case RTE_SCHED_TYPE_PARALLEL:
      return "parallel";
  }
  return "?";
}

std::string_view step_word(trace::Step s) {
  switch (s) {
    case trace::Step::Rx:
      return "rx";
    case trace::Step::Vector:
      return "vector";
    case trace::Step::Dequeue:
      return "sched";
    case trace::Step::Stage:
      return "stage";
    case trace::Step::Tx:
    case trace::Step::TxDrop:
      return "tx";
  }
  return "?";
}

// Whether a packet's trace has reached the end of its path.
bool finished(const trace::PacketTrace& p) {
  return std::any_of(p.steps.begin(), p.steps.end(), [](const trace::Record& r) {
    if (r.step == trace::Step::Tx || r.step == trace::Step::TxDrop) return true;
    return r.step == trace::Step::Stage && (static_cast<Verdict>(r.verdict) == Verdict::Drop ||
                                            static_cast<Verdict>(r.verdict) == Verdict::Kernel);
  });
}

}  // namespace

std::string summarize_frame(const uint8_t* d, size_t len) {
  if (len < 14) return fmt::format("{} B frame", len);
  size_t off = 12;
  uint16_t type = be16(d + off);
  std::string vlan;
  while ((type == 0x8100 || type == 0x88a8) && off + 6 <= len) {
    vlan += fmt::format("vlan {} ", be16(d + off + 2) & 0x0fff);
    off += 4;
    type = be16(d + off);
  }
  off += 2;
  const uint8_t* l3 = d + off;
  const size_t room = len - off;
  uint8_t proto = 0;
  const uint8_t* l4 = nullptr;
  size_t l4_room = 0;
  std::string src, dst, family;
  if (type == 0x0800 && room >= 20) {
    const size_t ihl = size_t{l3[0] & 0x0fu} * 4;
    family = "IPv4";
    proto = l3[9];
    src = ip4(l3 + 12);
    dst = ip4(l3 + 16);
    const bool first_fragment = (be16(l3 + 6) & 0x1fff) == 0;
    if (ihl >= 20 && room > ihl && first_fragment) {
      l4 = l3 + ihl;
      l4_room = room - ihl;
    }
  } else if (type == 0x86dd && room >= 40) {
    family = "IPv6";
    proto = l3[6];
    src = ip6(l3 + 8);
    dst = ip6(l3 + 24);
    l4 = l3 + 40;
    l4_room = room - 40;
  } else if (type == 0x0806) {
    if (room >= 28)
      return fmt::format("{}ARP {} {} asks for {}", vlan, be16(l3 + 6) == 1 ? "request" : "reply",
                         ip4(l3 + 14), ip4(l3 + 24));
    return vlan + "ARP";
  } else {
    return fmt::format("{}ethertype 0x{:04x}", vlan, type);
  }
  if ((proto == 6 || proto == 17) && l4 && l4_room >= 4) {
    // [2001:db8::1]:80, as in a URL: an IPv6 address ends in a group that looks like a port.
    const bool v6 = family == "IPv6";
    return fmt::format("{}{} {} {}{}{}:{} > {}{}{}:{}", vlan, family, proto == 6 ? "TCP" : "UDP",
                       v6 ? "[" : "", src, v6 ? "]" : "", be16(l4), v6 ? "[" : "", dst,
                       v6 ? "]" : "", be16(l4 + 2));
  }
  if ((proto == 1 || proto == 58) && l4 && l4_room >= 2) {
    std::string what = fmt::format("type {} code {}", l4[0], l4[1]);
    if ((proto == 1 && l4[0] == 8) || (proto == 58 && l4[0] == 128)) what = "echo request";
    if ((proto == 1 && l4[0] == 0) || (proto == 58 && l4[0] == 129)) what = "echo reply";
    return fmt::format("{}{} {} {} > {} {}", vlan, family, proto == 1 ? "ICMP" : "ICMPv6", src, dst,
                       what);
  }
  return fmt::format("{}{} proto {} {} > {}", vlan, family, proto, src, dst);
}

std::string describe_step(const trace::Record& r, const TraceNames& names) {
  switch (r.step) {
    case trace::Step::Rx: {
      std::string s = fmt::format("{} queue {}: {}, {} B, flow hash 0x{:08x}",
                                  name_of(names.ports, r.port, "port"), r.queue,
                                  summarize_frame(r.data.data(), r.bytes), r.length, r.value);
      if (r.extra != kNoRule) s += fmt::format(", lifted by steering rule {}", r.extra);
      return s;
    }
    case trace::Step::Vector:
      return fmt::format("flow bucket {} of {} queue {}, position {} in its vector", r.index,
                         name_of(names.ports, r.port, "port"), r.queue, r.value);
    case trace::Step::Dequeue:
      return fmt::format("queue {} ({}) {}, flow {}, event of {} packet{}", r.queue,
                         name_of(names.queues, r.queue, "queue"), sched_word(r.extra), r.index,
                         r.value, r.value == 1 ? "" : "s");
    case trace::Step::Stage: {
      const auto v = static_cast<Verdict>(r.verdict);
      // The stage's name is the step's name (TraceManager::show).
      std::string s(verdict_word(r.verdict));
      if (v == Verdict::Drop)
        s += fmt::format(" ({})", drop_reason_name(static_cast<DropReason>(r.reason)));
      if (r.extra == trace::kTraceAnswered) {
        return fmt::format("drop ({}), answered with an ICMP error out {}",
                           drop_reason_name(static_cast<DropReason>(r.reason)),
                           name_of(names.ports, r.port, "port"));
      }
      if ((v == Verdict::Transmit || v == Verdict::Continue) && r.port != kNoPort)
        s += fmt::format(" out {}", name_of(names.ports, r.port, "port"));
      if ((v == Verdict::Transmit || v == Verdict::Continue) && r.value != kNoNextHop) {
        if (r.value == kNextHopConnected) {
          s += " (connected)";
        } else {
          std::string hop = names.nexthop ? names.nexthop(r.value) : "";
          s += hop.empty() ? fmt::format(" via next hop {}", r.value) : " via " + hop;
        }
      }
      if (r.bytes > 0)
        s += fmt::format(": {}", std::string_view(reinterpret_cast<const char*>(r.data.data()),
                                                  std::min<size_t>(r.bytes, r.data.size())));
      return s;
    }
    case trace::Step::Tx:
      return fmt::format("handed to {} queue {}", name_of(names.ports, r.port, "port"), r.queue);
    case trace::Step::TxDrop:
      return fmt::format("dropped at {} ({})",
                         static_cast<Verdict>(r.verdict) == Verdict::Kernel
                             ? "the kernel path of " + name_of(names.ports, r.port, "port")
                             : name_of(names.ports, r.port, "port"),
                         drop_reason_name(static_cast<DropReason>(r.reason)));
  }
  return "";
}

TraceManager::TraceManager(ControlServer& server, TraceTap& tap, TraceNames names)
    : server_(server), tap_(tap), names_(std::move(names)), tracer_(trace::tracer()) {}

TraceManager::~TraceManager() {
  clear();
}

void TraceManager::free_filter() noexcept {
  if (filter_) rte_bpf_destroy(filter_);
  filter_ = nullptr;
}

void TraceManager::clear() noexcept {
  check_call_.reset();
  tracer_.stop_marking();
  if (rx_hooked_ || tx_hooked_) tap_.detach_trace();
  rx_hooked_ = tx_hooked_ = false;
  free_filter();
}

Result<Json> TraceManager::add(uint32_t count, const std::string& port, const std::string& filter) {
  std::vector<PortId> ports;
  for (size_t i = 0; i < names_.ports.size(); ++i) {
    if (names_.ports[i].empty()) continue;  // an id whose port a reload removed
    if (port.empty() || names_.ports[i] == port) ports.push_back(PortId{static_cast<uint16_t>(i)});
  }
  if (ports.empty()) return fail("no port named '{}'", port);
  rte_bpf* bpf = nullptr;
  if (!filter.empty()) {
    auto compiled = compile_capture_filter(filter, 65535);
    if (!compiled) return std::unexpected(compiled.error());
    bpf = *compiled;
  }
  clear();
  filter_ = bpf;
  tracer_.arm(count, filter_);
  if (auto r = tap_.attach_trace(ports); !r) {
    tracer_.stop_marking();
    free_filter();
    return std::unexpected(r.error());
  }
  rx_hooked_ = tx_hooked_ = true;
  port_ = port;
  filter_text_ = filter;
  schedule_check();
  return show();
}

void TraceManager::schedule_check() {
  check_call_ = server_.schedule(kCheckInterval, [this] { check(); });
}

void TraceManager::check() {
  const auto now = std::chrono::steady_clock::now();
  if (rx_hooked_ && tracer_.taken() >= tracer_.asked()) {
    tap_.detach_trace_rx();  // no lcore marks now: the filter may go
    rx_hooked_ = false;
    free_filter();
    done_at_ = now;
  }
  if (!rx_hooked_ && tx_hooked_) {
    const auto packets = tracer_.read();
    const bool all_out = std::all_of(packets.begin(), packets.end(), finished);
    if (all_out || now - done_at_ > kLinger) {
      tap_.detach_trace();
      tx_hooked_ = false;
    }
  }
  if (rx_hooked_ || tx_hooked_) {
    schedule_check();
  } else {
    check_call_.reset();
  }
}

Json TraceManager::show() const {
  const auto packets = tracer_.read();
  const double us_per_tsc = 1e6 / static_cast<double>(tsc_hz());
  Json steps = Json::array();
  Json list = Json::array();
  Json lines = Json::array();
  size_t done = 0;
  size_t step_width = 0;
  for (const auto& p : packets) {
    for (const auto& r : p.steps) {
      step_width = std::max(step_width, r.step == trace::Step::Stage
                                            ? name_of(names_.stages, r.index, "stage").size()
                                            : step_word(r.step).size());
    }
  }
  for (const auto& p : packets) {
    const bool out = finished(p);
    done += out;
    const uint64_t t0 = p.steps.empty() ? 0 : p.steps.front().tsc;
    Json psteps = Json::array();
    std::string summary;
    lines.push_back(fmt::format("packet {}{}", p.number, out ? "" : " (still on its way)"));
    for (const auto& r : p.steps) {
      if (r.step == trace::Step::Rx) summary = summarize_frame(r.data.data(), r.bytes);
      const double us = static_cast<double>(r.tsc - t0) * us_per_tsc;
      const std::string step = r.step == trace::Step::Stage
                                   ? name_of(names_.stages, r.index, "stage")
                                   : std::string(step_word(r.step));
      std::string detail = describe_step(r, names_);
      lines.push_back(fmt::format("  {:>10}  lcore {}  {:<{}}  {}", fmt::format("+{:.1f} us", us),
                                  r.lcore, step, step_width, detail));
      Json row{{"packet", p.number},
               {"time_us", us},
               {"lcore", r.lcore},
               {"step", step},
               {"detail", std::move(detail)}};
      psteps.push_back(row);
      steps.push_back(std::move(row));
    }
    list.push_back(
        Json{{"packet", p.number}, {"summary", summary}, {"finished", out}, {"steps", psteps}});
  }
  const char* state = rx_hooked_ ? "armed" : tx_hooked_ ? "following" : "idle";
  return Json{{"trace",
               {{"state", state},
                {"port", port_.empty() ? "any" : port_},
                {"filter", filter_text_},
                {"asked", tracer_.asked()},
                {"taken", tracer_.taken()},
                {"finished", done},
                {"records_lost", tracer_.lost()}}},
              {"packets", std::move(list)},
              {"steps", std::move(steps)},
              {"lines", std::move(lines)}};
}

void TraceManager::register_commands(Registry& registry) {
  View view{{fields("", "/trace",
                    {{"STATE", "state"},
                     {"PORT", "port"},
                     {"FILTER", "filter"},
                     {"ASKED", "asked", Unit::Count},
                     {"TAKEN", "taken", Unit::Count},
                     {"FINISHED", "finished", Unit::Count},
                     {"RECORDS LOST", "records_lost", Unit::Count}}),
             text("", "/lines")}};
  (void)registry.add_command(Command{
      &kTraceSpec, [this](const CommandContext&) -> CommandResult { return show(); }, view});
  (void)registry.add_command(Command{&kTraceAddSpec,
                                     [this](const CommandContext& ctx) -> CommandResult {
                                       ArgReader a(ctx);
                                       auto r = add(static_cast<uint32_t>(a.uint("count", 0)),
                                                    a.string("port", ""), a.string("filter", ""));
                                       if (!r)
                                         return command_error(ErrorCode::Failed, "{}",
                                                              r.error().message);
                                       return *r;
                                     },
                                     view});
  (void)registry.add_command(Command{&kTraceClearSpec,
                                     [this](const CommandContext&) -> CommandResult {
                                       clear();
                                       port_.clear();
                                       filter_text_.clear();
                                       // A new, empty generation: the old records are not read.
                                       tracer_.arm(0, nullptr);
                                       return show();
                                     },
                                     view});
}

}  // namespace vecflow::control
