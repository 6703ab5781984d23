#include "pipeline/conntrack/conntrack_commands.h"

#include <netinet/in.h>

#include <algorithm>
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>

#include "api/values.h"
#include "pipeline/conntrack/conntrack_stage.h"

namespace vecflow {

// The stage's readers for the control plane (control thread).
ConntrackCounters ConntrackStage::counters() const noexcept {
  ConntrackCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    const LcoreState& s = lcores_[i];
    for (size_t k = 0; k < kCtMarkCount; ++k)
      c.marks[k] += s.marks[k].load();
    c.created += s.created.load();
    c.expired += s.expired.load();
    c.table_full += s.table_full.load();
    c.nat_no_port += s.nat_no_port.load();
    c.fragments_known += s.fragments_known.load();
    c.fragments_unknown += s.fragments_unknown.load();
  }
  return c;
}

std::array<uint64_t, kConnStateCount> ConntrackStage::sessions_by_state() const {
  std::array<uint64_t, kConnStateCount> n{};
  table_->for_each(ConnTable::tick(rte_rdtsc()),
                   [&](const ConnSnapshot& s) { ++n[size_t(s.state)]; });
  return n;
}

std::vector<ConnSnapshot> ConntrackStage::sessions(const SessionFilter& f) const {
  std::vector<ConnSnapshot> out;
  for_each_session(f, [&](const ConnSnapshot& s) { out.push_back(s); });
  return out;
}

void ConntrackStage::for_each_session(const SessionFilter& f,
                                      const std::function<void(const ConnSnapshot&)>& fn) const {
  const auto has_address = [&](const ConnKey& k) {
    if (!f.address) return true;
    if (f.address->version != k.version) return false;
    const size_t n = k.version == 4 ? 4 : 16;
    return std::equal(k.src.begin(), k.src.begin() + n, f.address->bytes.begin()) ||
           std::equal(k.dst.begin(), k.dst.begin() + n, f.address->bytes.begin());
  };
  table_->for_each(ConnTable::tick(rte_rdtsc()), [&](const ConnSnapshot& s) {
    if (f.state && s.state != *f.state) return;
    if (f.zone && s.key.zone != *f.zone) return;
    if (!has_address(s.key)) return;
    if (f.port) {
      const uint16_t p = rte_cpu_to_be_16(*f.port);
      const bool ports = has_l4_ports(s.key.proto);
      if (!ports || (s.key.src_port != p && s.key.dst_port != p)) return;
    }
    fn(s);
  });
}

}  // namespace vecflow

namespace vecflow::control {
namespace {

inline const MetricFamily kCtSessions{"vecflow_conntrack_sessions",
                                      "Live sessions of a conntrack stage, by state",
                                      MetricType::Gauge,
                                      {"stage", "state"}};
inline const MetricFamily kCtLimit{"vecflow_conntrack_max_sessions",
                                   "Sessions a conntrack stage may hold (max_sessions)",
                                   MetricType::Gauge,
                                   {"stage"}};
inline const MetricFamily kCtPackets{
    "vecflow_conntrack_packets_total",
    "Packets a conntrack stage marked: new, established, related, invalid",
    MetricType::Counter,
    {"stage", "mark"}};
inline const MetricFamily kCtCreated{"vecflow_conntrack_created_total",
                                     "Sessions a conntrack stage created",
                                     MetricType::Counter,
                                     {"stage"}};
inline const MetricFamily kCtExpired{"vecflow_conntrack_expired_total",
                                     "Sessions a conntrack stage removed after their timeout",
                                     MetricType::Counter,
                                     {"stage"}};
inline const MetricFamily kCtTableFull{
    "vecflow_conntrack_table_full_total",
    "New connections a conntrack stage refused because its table was full (ct_table_full)",
    MetricType::Counter,
    {"stage"}};
inline const MetricFamily kCtFragments{
    "vecflow_conntrack_fragments_total",
    "Later IP fragments a conntrack stage saw, by whether their datagram's first fragment "
    "was known (known: they took its mark and addresses; unknown: tracked by their addresses, "
    "or dropped as nat_fragment)",
    MetricType::Counter,
    {"stage", "first"}};

inline const MetricFamily kNatNoPort{
    "vecflow_nat_no_port_total",
    "New connections a conntrack stage's source NAT refused: no free port in the rule's range "
    "(nat_no_port)",
    MetricType::Counter,
    {"stage"}};
// A conntrack stage's counters under {stage}; its packets by mark go to kCtPackets (an array,
// one series per CtMark) and nat_no_port, collected only where the stage translates, is
// kNatCounters.
constexpr auto kCtCounters = std::to_array<CounterField<ConntrackCounters, uint64_t>>({
    {"created", &kCtCreated, &ConntrackCounters::created},
    {"expired", &kCtExpired, &ConntrackCounters::expired},
    {"table_full", &kCtTableFull, &ConntrackCounters::table_full},
    {"fragments_known", &kCtFragments, &ConntrackCounters::fragments_known, "known"},
    {"fragments_unknown", &kCtFragments, &ConntrackCounters::fragments_unknown, "unknown"},
});
constexpr auto kNatCounters = std::to_array<CounterField<ConntrackCounters, uint64_t>>({
    {"nat_no_port", &kNatNoPort, &ConntrackCounters::nat_no_port},
});
static_assert(covers_struct(kCtCounters, sizeof(ConntrackCounters::marks) +
                                             kNatCounters.size() * sizeof(uint64_t)));
inline const MetricFamily kNatPortsInUse{"vecflow_nat_ports_in_use",
                                         "Mapped ports of a source NAT pool address, by protocol",
                                         MetricType::Gauge,
                                         {"stage", "pool", "proto"}};

constexpr std::pair<NatProto, std::string_view> kNatProtos[] = {
    {NatProto::Tcp, "tcp"}, {NatProto::Udp, "udp"}, {NatProto::Icmp, "icmp"}};

std::string v4_text(uint32_t addr_be) {
  const auto* b = reinterpret_cast<const uint8_t*>(&addr_be);
  return fmt::format("{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
}
std::string v4_endpoint(uint32_t addr_be, uint16_t port_be) {
  return fmt::format("{}:{}", v4_text(addr_be), rte_be_to_cpu_16(port_be));
}

// What NAT does to a session: its originator's endpoint as it leaves, and the public endpoint
// the originator addressed; null when untranslated.
Json nat_text(const ConntrackStage& st, const ConnSnapshot& s) {
  const NatMap* nat = st.nat();
  if (nat == nullptr || !(s.flags & (kConnSnat | kConnDnat))) return nullptr;
  std::string out;
  if (s.flags & kConnSnat) out = "src as " + v4_endpoint(nat->pool_address(s.nat_pool), s.nat_port);
  if (s.flags & kConnDnat) {
    const DnatRule& r = nat->dnat_rule(s.nat_rule);
    out +=
        fmt::format("{}dst was {}", out.empty() ? "" : ", ", v4_endpoint(r.pub.addr, r.pub.port));
  }
  return out;
}

constexpr CtMark kMarks[] = {CtMark::New, CtMark::Established, CtMark::Related, CtMark::Invalid};

std::optional<ConnState> state_from_name(std::string_view name) {
  for (size_t s = 0; s < kConnStateCount; ++s)
    if (conn_state_name(static_cast<ConnState>(s)) == name) return static_cast<ConnState>(s);
  return std::nullopt;
}

// `zones`: the stage's zone_names().
Json session_row(const ConntrackStage& st, const ConnSnapshot& s,
                 const std::vector<std::string>& zones) {
  IpAddress src, dst;
  src.version = dst.version = s.key.version;
  src.bytes = s.key.src;
  dst.bytes = s.key.dst;
  const bool ports =
      s.key.proto == IPPROTO_TCP || s.key.proto == IPPROTO_UDP || s.key.proto == IPPROTO_SCTP;
  const bool echo = s.key.proto == IPPROTO_ICMP || s.key.proto == IPPROTO_ICMPV6;
  const double hz = double(st.tsc_hz());
  const uint64_t now = rte_rdtsc();
  const double tick_s = double(uint64_t{1} << ConnTable::kTickShift) / hz;
  const auto port = [&](uint16_t be) { return ports ? Json(rte_be_to_cpu_16(be)) : Json(nullptr); };
  return Json{
      {"stage", st.name()},
      {"vrf", s.key.zone < zones.size() ? zones[s.key.zone] : std::to_string(s.key.zone)},
      {"proto", proto_name(s.key.proto)},
      {"src", src.to_string()},
      {"src_port", port(s.key.src_port)},
      {"dst", dst.to_string()},
      {"dst_port", port(s.key.dst_port)},
      {"icmp_id", echo && s.key.src_port ? Json(rte_be_to_cpu_16(s.key.src_port)) : Json(nullptr)},
      {"state", conn_state_name(s.state)},
      {"packets", s.packets[0] + s.packets[1]},
      {"bytes", s.bytes[0] + s.bytes[1]},
      {"orig_packets", s.packets[0]},
      {"orig_bytes", s.bytes[0]},
      {"reply_packets", s.packets[1]},
      {"reply_bytes", s.bytes[1]},
      {"age_s", double(now - s.created) / hz},
      {"idle_s", double(now - s.last_seen) / hz},
      {"expires_s", double(s.expires_in_ticks) * tick_s},
      {"windows_checked", (s.flags & kConnLiberal) == 0},
      {"offloaded", s.offloaded},
      {"nat", nat_text(st, s)}};
}

CommandResult sessions(Pipeline& pipeline, const CommandContext& ctx) {
  ArgReader a(ctx);
  const auto only = a.string("stage");
  const auto address_text = a.string("address");
  const auto port = a.uint("port");
  const auto state_text = a.string("state");
  const uint64_t top = a.uint("top", 20);
  const std::string sort = a.string("sort", "packets");
  const auto vrf = a.string("vrf");
  SessionFilter f;
  if (address_text) {
    f.address = parse_ip_address(*address_text);
    if (!f.address)
      return std::unexpected(
          CommandError{ErrorCode::BadArguments,
                       fmt::format("address: '{}' is not an IP address", *address_text),
                       {}});
  }
  if (port) f.port = static_cast<uint16_t>(*port);
  if (state_text) {
    f.state = state_from_name(*state_text);
    if (!f.state) {
      std::string names;
      for (size_t s = 0; s < kConnStateCount; ++s)
        names += fmt::format("{}{}", s ? ", " : "", conn_state_name(static_cast<ConnState>(s)));
      return std::unexpected(
          CommandError{ErrorCode::BadArguments,
                       fmt::format("state: '{}' is not one of {}", *state_text, names),
                       {}});
    }
  }
  const auto stages = pipeline.all<ConntrackStage>();
  if (only && std::none_of(stages.begin(), stages.end(),
                           [&](const ConntrackStage* s) { return s->name() == *only; }))
    return std::unexpected(
        CommandError{ErrorCode::BadArguments, fmt::format("no conntrack stage '{}'", *only), {}});

  Json summary = Json::array();
  Json rows = Json::array();
  uint64_t matched = 0;
  for (const ConntrackStage* st : stages) {
    if (only && st->name() != *only) continue;
    const std::vector<std::string> zones = st->zone_names();
    SessionFilter in = f;
    if (vrf) {
      const auto it = std::ranges::find(zones, *vrf);
      if (vrf->empty() || it == zones.end()) {
        std::vector<std::string> names;
        std::ranges::copy_if(zones, std::back_inserter(names),
                             [](const std::string& z) { return !z.empty(); });
        return std::unexpected(
            CommandError{ErrorCode::BadArguments,
                         fmt::format("vrf: no VRF '{}'; VRFs: {}", *vrf, fmt::join(names, ", ")),
                         {}});
      }
      in.zone = static_cast<uint8_t>(it - zones.begin());
    }
    const auto by_state = st->sessions_by_state();
    uint64_t live = 0;
    for (size_t s = 0; s < kConnStateCount; ++s) {
      live += by_state[s];
      if (by_state[s] == 0) continue;
      summary.push_back({{"stage", st->name()},
                         {"state", conn_state_name(static_cast<ConnState>(s))},
                         {"sessions", by_state[s]}});
    }
    summary.push_back({{"stage", st->name()},
                       {"state", "total"},
                       {"sessions", live},
                       {"max_sessions", st->table().max_sessions()}});
    // The largest `top` by a min-heap, so a table of a million sessions is never copied whole.
    const auto key = [&](const ConnSnapshot& s) {
      if (sort == "bytes") return s.bytes[0] + s.bytes[1];
      if (sort == "age") return ~s.created;  // oldest first
      return s.packets[0] + s.packets[1];
    };
    const auto larger = [&](const ConnSnapshot& x, const ConnSnapshot& y) {
      return key(x) > key(y);
    };
    std::vector<ConnSnapshot> best;
    best.reserve(std::min<uint64_t>(top, st->table().capacity()));
    st->for_each_session(in, [&](const ConnSnapshot& s) {
      ++matched;
      if (best.size() < top) {
        best.push_back(s);
        std::push_heap(best.begin(), best.end(), larger);
      } else if (larger(s, best.front())) {
        std::pop_heap(best.begin(), best.end(), larger);
        best.back() = s;
        std::push_heap(best.begin(), best.end(), larger);
      }
    });
    std::sort_heap(best.begin(), best.end(), larger);
    for (const ConnSnapshot& s : best)
      rows.push_back(session_row(*st, s, zones));
  }
  Json out{{"summary", std::move(summary)}, {"matched", matched}, {"sessions", std::move(rows)}};
  // One session matched: all of it, as fields.
  if (matched == 1 && out["sessions"].size() == 1) out["session"] = out["sessions"][0];
  return out;
}

}  // namespace

std::vector<CounterTableInfo> conntrack_counter_tables() {
  return {describe("ConntrackCounters", kCtCounters),
          describe("ConntrackCounters (NAT)", kNatCounters)};
}

void add_conntrack_commands(Registry& registry, Pipeline& pipeline) {
  if (pipeline.all<ConntrackStage>().empty()) return;
  registry.add_collector("conntrack", [&pipeline](Snapshot& s) {
    for (const ConntrackStage* st : pipeline.all<ConntrackStage>()) {
      const std::string& n = st->name();
      const auto by_state = st->sessions_by_state();
      for (size_t i = 0; i < kConnStateCount; ++i)
        s.set(kCtSessions, {n, std::string(conn_state_name(static_cast<ConnState>(i)))},
              static_cast<double>(by_state[i]));
      s.set(kCtLimit, {n}, static_cast<double>(st->table().max_sessions()));
      const ConntrackCounters c = st->counters();
      for (CtMark m : kMarks)
        s.add(kCtPackets, {n, std::string(ct_mark_name(m))}, c.marks[size_t(m)]);
      add_counters(s, kCtCounters, c, {n});
      if (const NatMap* nat = st->nat()) {
        add_counters(s, kNatCounters, c, {n});
        for (unsigned p = 0; p < nat->pools(); ++p)
          for (const auto& [proto, name] : kNatProtos)
            s.set(kNatPortsInUse, {n, v4_text(nat->pool_address(p)), std::string(name)},
                  static_cast<double>(nat->ports_in_use(p, proto)));
      }
    }
  });
  (void)registry.add_command(Command{
      &kSessionsSpec, [&pipeline](const CommandContext& ctx) { return sessions(pipeline, ctx); },
      View{{table("", "/summary",
                  {{"STAGE", "stage"},
                   {"STATE", "state"},
                   {"SESSIONS", "sessions", Unit::Count},
                   {"MAX", "max_sessions", Unit::Count}}),
            table("sessions", "/sessions",
                  {{"VRF", "vrf"},
                   {"PROTO", "proto"},
                   {"SOURCE", "src"},
                   {"SPORT", "src_port"},
                   {"DESTINATION", "dst"},
                   {"DPORT", "dst_port"},
                   {"STATE", "state"},
                   {"NAT", "nat"},
                   {"OFFLOADED", "offloaded"},
                   {"PACKETS", "packets", Unit::Count},
                   {"BYTES", "bytes", Unit::Bytes},
                   {"AGE", "age_s", Unit::Seconds},
                   {"EXPIRES", "expires_s", Unit::Seconds}}),
            fields("session", "/session",
                   {{"stage", "stage"},
                    {"VRF", "vrf"},
                    {"protocol", "proto"},
                    {"originator", "src"},
                    {"originator port", "src_port"},
                    {"responder", "dst"},
                    {"responder port", "dst_port"},
                    {"ICMP id", "icmp_id"},
                    {"state", "state"},
                    {"packets out", "orig_packets", Unit::Count},
                    {"bytes out", "orig_bytes", Unit::Bytes},
                    {"packets back", "reply_packets", Unit::Count},
                    {"bytes back", "reply_bytes", Unit::Bytes},
                    {"age", "age_s", Unit::Seconds},
                    {"idle", "idle_s", Unit::Seconds},
                    {"expires in", "expires_s", Unit::Seconds},
                    {"TCP windows checked", "windows_checked"},
                    {"offloaded to XDP (not in the counts)", "offloaded"},
                    {"NAT", "nat"}})}}});
}

}  // namespace vecflow::control
