// The `ports` section (config/ports.h): each entry read by its type, and the VLAN ports'
// device names, which need their parents'.
#include "config/ports.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace vecflow::config::detail {
namespace {

// This machine's kernel release (uname -r).
const std::string& kernel_release() {
  static const std::string release = [] {
    utsname u{};
    return uname(&u) == 0 ? std::string(u.release) : std::string();
  }();
  return release;
}

// `queues: all` (every rx queue of the interface, read by vecflow; filled in at start-up),
// `queues: 2` (queues 0..1, read by vecflow) or a list of ranges with owners:
//   queues: [{queues: 0-1, owner: vecflow}, {queues: 2-3, owner: dpdk}]
void read_queue_ranges(Ctx& ctx, const YAML::Node& n, const std::string& path, AfXdpPort& port) {
  std::vector<QueueRange>& out = port.queues;
  if (n.IsScalar() && n.Scalar() == "all") {
    port.all_queues = true;
    out.clear();
    return;
  }
  port.all_queues = false;
  if (n.IsScalar() && !n.Scalar().empty() &&
      !std::isdigit(static_cast<unsigned char>(n.Scalar()[0])) && n.Scalar()[0] != '-' &&
      !detail::text_fault(n.Scalar())) {
    ctx.error(n, path,
              fmt::format("expected `all`, a queue count or a list of queue ranges, found '{}'",
                          n.Scalar()));
    return;
  }
  if (n.IsScalar()) {
    auto count = read_uint(ctx, n, path, 1, 256);
    if (count) out = {QueueRange{0, static_cast<uint16_t>(*count), QueueOwner::Vecflow}};
    return;
  }
  std::vector<QueueRange> ranges;
  for_each_item(ctx, n, path, [&](const YAML::Node& item, const std::string& ip) {
    MapReader m(ctx, item, ip, {"queues", "owner"});
    if (!m.ok()) return;
    QueueRange r;
    m.get_enum<QueueOwner>("owner", r.owner,
                           {{"vecflow", QueueOwner::Vecflow}, {"dpdk", QueueOwner::Dpdk}});
    std::optional<PortRange> span;
    if (m.require("queues") && m.get_port_range("queues", span)) {
      if (span->high > 255) {
        ctx.error(m.child("queues"), m.key_path("queues"), "queue ids are 0..255");
        return;
      }
      r.first = span->low;
      r.count = static_cast<uint16_t>(span->high - span->low + 1);
      ranges.push_back(r);
    }
  });
  if (n.IsSequence() && n.size() == 0) ctx.error(n, path, "needs at least one queue range");
  out = std::move(ranges);
}

std::string devargs_iface(const std::string& devargs) {
  // "net_af_packet0,iface=eth2,qpairs=1" -> "eth2"
  size_t pos = 0;
  while ((pos = devargs.find("iface=", pos)) != std::string::npos) {
    if (pos > 0 && devargs[pos - 1] == ',') {
      size_t end = devargs.find(',', pos);
      return devargs.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
    }
    pos += 6;
  }
  return {};
}

bool looks_like_pci(const std::string& s) {
  // 0000:03:00.0 or 03:00.0
  unsigned a, b, c, d;
  char tail;
  return std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4 ||
         std::sscanf(s.c_str(), "%x:%x.%x%c", &b, &c, &d, &tail) == 3;
}

enum class PortType : uint8_t { AfXdp, Dpdk, Vlan };

constexpr unsigned type_bit(PortType t) {
  return 1u << static_cast<unsigned>(t);
}
constexpr unsigned kAfXdp = type_bit(PortType::AfXdp);
constexpr unsigned kDpdk = type_bit(PortType::Dpdk);
constexpr unsigned kVlan = type_bit(PortType::Vlan);

// The keys only some port types take, and which (a mask of type_bit()s); a key given on a port
// of another type is an error at the key. name, type and mtu apply to every port.
struct TypedKey {
  std::string_view key;
  unsigned types;
};
constexpr TypedKey kTypedKeys[] = {
    {"lcore", kAfXdp | kDpdk},
    {"interface", kAfXdp | kVlan},
    {"queues", kAfXdp | kDpdk},
    {"other_queues", kAfXdp},
    {"mode", kAfXdp},
    {"xdp_mode", kAfXdp},
    {"busy_poll", kAfXdp},
    {"ring_size", kAfXdp},
    {"frame_size", kAfXdp},
    {"devargs", kDpdk},
    {"pci", kDpdk},
    {"rx_descriptors", kDpdk},
    {"tx_descriptors", kDpdk},
    {"parent", kVlan},
    {"vlan", kVlan},
    {"proto", kVlan},
};

// "afxdp", "afxdp and vlan": the port types of a mask.
std::string type_names(unsigned types) {
  static constexpr std::pair<unsigned, std::string_view> kNames[] = {
      {kAfXdp, "afxdp"}, {kDpdk, "dpdk"}, {kVlan, "vlan"}};
  std::string out;
  for (auto [bit, name] : kNames) {
    if (types & bit) out += fmt::format("{}{}", out.empty() ? "" : " and ", name);
  }
  return out;
}

void reject_other_types_keys(Ctx& ctx, const MapReader& m, PortType type) {
  for (const auto& [key, types] : kTypedKeys) {
    if (!m.has(key) || (types & type_bit(type))) continue;
    // A VLAN port's frames arrive on its parent's link, read through the parent's queues.
    const bool queues = key == "lcore" || key == "queues" || key == "other_queues";
    ctx.error(m.child(key), m.key_path(key),
              fmt::format("'{}' applies to {} ports only{}", key, type_names(types),
                          type == PortType::Vlan && queues
                              ? ": a vlan port is received through its parent's queues"
                              : ""));
  }
}

bool read_interface(Ctx& ctx, MapReader& m, std::string& out) {
  if (!m.get("interface", out)) return false;
  if (out.empty() || out.size() > kMaxInterfaceName) {
    ctx.error(m.child("interface"), m.key_path("interface"),
              fmt::format("interface names are 1..{} characters", kMaxInterfaceName));
    return false;
  }
  return true;
}

void read_afxdp_port(Ctx& ctx, MapReader& m, PortConfig& p) {
  AfXdpPort a;
  if (m.require("interface")) read_interface(ctx, m, a.interface);
  a.all_queues = true;
  a.queues_where = p.where;
  if (m.has("queues")) {
    a.queues_where = ctx.at(m.child("queues"));
    read_queue_ranges(ctx, m.child("queues"), m.key_path("queues"), a);
  }
  SteerActionKind other = SteerActionKind::Pass;
  if (m.get_enum<SteerActionKind>(
          "other_queues", other,
          {{"pass", SteerActionKind::Pass}, {"drop", SteerActionKind::Drop}})) {
    a.other_queues = other;
  }
  m.get_enum<XskMode>(
      "mode", a.mode,
      {{"auto", XskMode::Auto}, {"copy", XskMode::Copy}, {"zerocopy", XskMode::ZeroCopy}});
  m.get_enum<XdpAttachMode>("xdp_mode", a.xdp_mode,
                            {{"auto", XdpAttachMode::Auto},
                             {"native", XdpAttachMode::Native},
                             {"generic", XdpAttachMode::Generic}});
  YAML::Node bp = m.child("busy_poll");
  if (bp.IsDefined()) {
    if (bp.IsScalar()) {
      m.get("busy_poll", a.busy_poll.enabled);
    } else {
      MapReader b(ctx, bp, m.key_path("busy_poll"), {"enabled", "budget", "timeout_us"});
      a.busy_poll.enabled = true;
      b.get("enabled", a.busy_poll.enabled);
      b.get("budget", a.busy_poll.budget, 1, 1024);
      b.get("timeout_us", a.busy_poll.timeout_us, 1, 1'000'000);
    }
  }
  for (auto key : {"ring_size", "frame_size"}) {
    uint32_t& v = std::string_view(key) == "ring_size" ? a.ring_size : a.frame_size;
    uint64_t lo = std::string_view(key) == "ring_size" ? 64 : 2048;
    uint64_t hi = std::string_view(key) == "ring_size" ? 32768 : 4096;
    if (m.get(key, v, lo, hi) && (v & (v - 1)) != 0) {
      ctx.error(m.child(key), m.key_path(key), fmt::format("{} must be a power of two", v));
    }
  }
  // A received frame (two VLAN tags at most) spans at most kAfxdpBuffersPerFrame UMEM
  // frames after the mbuf's and XDP's headroom (io/packet_pool.h), one on queues DPDK owns:
  // a larger MTU would have the kernel drop what it cannot place.
  const bool dpdk_owned = std::any_of(a.queues.begin(), a.queues.end(),
                                      [](const auto& r) { return r.owner == QueueOwner::Dpdk; });
  const uint32_t max_mtu = afxdp_max_mtu(a.frame_size, dpdk_owned);
  const uint32_t one_buffer = afxdp_max_mtu(a.frame_size, dpdk_owned, false);
  if (p.mtu && *p.mtu > max_mtu) {
    ctx.error(m.child("mtu"), m.key_path("mtu"),
              fmt::format("mtu {} does not fit the port's {}-byte buffers (at most mtu {}{})",
                          *p.mtu, dpdk_owned ? 4096 : a.frame_size, max_mtu,
                          dpdk_owned            ? ": DPDK's net_af_xdp takes a frame in one buffer"
                          : a.frame_size < 4096 ? "; frame_size: 4096 holds more"
                                                : ""));
  } else if (p.mtu && *p.mtu > one_buffer && !kernel_has_xsk_multi_buffer(kernel_release())) {
    // What this machine can do: the file is checked where it will run.
    ctx.error(m.child("mtu"), m.key_path("mtu"),
              fmt::format("mtu {} needs frames in several AF_XDP buffers, which Linux {} cannot "
                          "do (multi-buffer: Linux 6.6 and later); at most mtu {} here",
                          *p.mtu, kernel_release(), one_buffer));
  }
  p.kind = std::move(a);
}

void read_dpdk_port(Ctx& ctx, MapReader& m, PortConfig& p) {
  DpdkPort d;
  bool has_devargs = m.has("devargs");
  bool has_pci = m.has("pci");
  if (has_devargs == has_pci) {
    ctx.error(m.node(), m.path(), "a dpdk port needs exactly one of 'devargs' (a vdev) or 'pci'");
  } else if (has_devargs && m.get("devargs", d.devargs)) {
    if (d.devargs.empty() || d.devargs.find(' ') != std::string::npos) {
      ctx.error(m.child("devargs"), m.key_path("devargs"),
                "expected a DPDK device string like 'net_af_packet0,iface=eth2'");
    }
    d.interface = devargs_iface(d.devargs);
  } else if (has_pci && m.get("pci", d.devargs)) {
    d.is_pci = true;
    if (!looks_like_pci(d.devargs)) {
      ctx.error(m.child("pci"), m.key_path("pci"),
                fmt::format("'{}' is not a PCI address like 0000:03:00.0", d.devargs));
    }
  }
  m.get("queues", d.queues, 1, 256);
  for (auto key : {"rx_descriptors", "tx_descriptors"}) {
    uint16_t& v = std::string_view(key) == "rx_descriptors" ? d.rx_descriptors : d.tx_descriptors;
    if (m.get(key, v, 64, 32768) && (v & (v - 1)) != 0) {
      ctx.error(m.child(key), m.key_path(key), fmt::format("{} must be a power of two", v));
    }
  }
  p.kind = std::move(d);
}

// The parent is checked once every port is known (validate.cc), and the device named then when
// the file does not (name_vlan_devices).
void read_vlan_port(Ctx& ctx, MapReader& m, PortConfig& p) {
  VlanPort v;
  if (m.require("parent")) m.get("parent", v.parent);
  if (m.require("vlan")) m.get("vlan", v.vlan, 1, 4094);  // 0 and 4095 are reserved (802.1Q)
  if (m.has("proto"))
    m.get_enum<VlanProto>("proto", v.proto,
                          {{"802.1q", VlanProto::Dot1q}, {"802.1ad", VlanProto::Dot1ad}});
  read_interface(ctx, m, v.interface);
  p.kind = std::move(v);
}

}  // namespace

void read_port(Ctx& ctx, const YAML::Node& n, const std::string& path,
               std::vector<PortConfig>& out) {
  std::vector<std::string_view> keys = {"name", "type", "mtu"};
  for (const auto& k : kTypedKeys)
    keys.push_back(k.key);
  MapReader m(ctx, n, path, std::move(keys));
  if (!m.ok()) return;
  PortConfig p;
  p.where = ctx.at(n);
  PortType type = PortType::AfXdp;
  const bool typed =
      m.require("type") &&
      m.get_enum<PortType>(
          "type", type,
          {{"afxdp", PortType::AfXdp}, {"dpdk", PortType::Dpdk}, {"vlan", PortType::Vlan}});
  if (m.require("name") && m.get("name", p.name)) {
    bool ok = !p.name.empty() && p.name.size() <= 32;
    for (char c : p.name) {
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    }
    if (!ok) {
      ctx.error(m.child("name"), m.key_path("name"),
                "port names are 1..32 letters, digits, '-' or '_'");
    }
  }
  if (m.has("lcore") && !(typed && type == PortType::Vlan)) {
    unsigned l = 0;
    if (m.get_lcore("lcore", l)) p.lcore = l;
  }
  // 68: the least every IPv4 link carries (RFC 791); 65535: the largest IPv4 packet.
  if (uint32_t mtu = 0; m.has("mtu") && m.get("mtu", mtu, 68, 65535)) p.mtu = mtu;
  if (!typed) return;
  reject_other_types_keys(ctx, m, type);
  switch (type) {
    case PortType::AfXdp:
      read_afxdp_port(ctx, m, p);
      break;
    case PortType::Dpdk:
      read_dpdk_port(ctx, m, p);
      break;
    case PortType::Vlan:
      read_vlan_port(ctx, m, p);
      break;
  }
  out.push_back(std::move(p));
}

void name_vlan_devices(Ctx& ctx, std::vector<PortConfig>& ports) {
  // The ports on a link first, then the QinQ ports: a QinQ port's default name is its parent
  // VLAN port's interface, named in the first round.
  for (const bool qinq : {false, true}) {
    for (size_t i = 0; i < ports.size(); ++i) {
      auto* v = std::get_if<VlanPort>(&ports[i].kind);
      if (!v || !v->interface.empty()) continue;
      const PortConfig* parent = nullptr;
      for (const auto& p : ports) {
        if (p.name == v->parent) parent = &p;
      }
      if ((parent != nullptr && parent->is_vlan()) != qinq) continue;
      // A DPDK port's link has no kernel device to hang VLAN devices on.
      const std::string* link = nullptr;
      if (const auto* a = parent ? std::get_if<AfXdpPort>(&parent->kind) : nullptr)
        link = &a->interface;
      if (const auto* pv = parent ? std::get_if<VlanPort>(&parent->kind) : nullptr)
        link = pv->interface.empty() ? nullptr : &pv->interface;
      if (!link) continue;
      std::string name = fmt::format("{}.{}", *link, v->vlan);
      if (name.size() > kMaxInterfaceName) {
        ctx.error(ports[i].where, fmt::format("ports[{}]", i),
                  fmt::format("the VLAN device's default name '{}' is longer than an interface "
                              "name may be ({} characters): name it with `interface:`",
                              name, kMaxInterfaceName));
        continue;
      }
      v->interface = std::move(name);
    }
  }
}

}  // namespace vecflow::config::detail
