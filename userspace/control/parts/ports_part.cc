#include "control/parts/ports_part.h"

#include <array>
#include <string>
#include <string_view>

#include "api/counter_table.h"
#include "api/families.h"
#include "api/values.h"
#include "control/command_specs.h"
#include "core/drop_reason.h"
#include "core/ids.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kRxPackets{"vecflow_port_rx_packets_total",
                                     "Packets a port queue received and handed on",
                                     MetricType::Counter,
                                     {"port", "queue"}};
inline const MetricFamily kRxBytes{"vecflow_port_rx_bytes_total",
                                   "Bytes of the packets a port queue received and handed on",
                                   MetricType::Counter,
                                   {"port", "queue"}};
inline const MetricFamily kTxPackets{"vecflow_port_tx_packets_total",
                                     "Packets a port queue accepted for transmission",
                                     MetricType::Counter,
                                     {"port", "queue"}};
inline const MetricFamily kTxBytes{"vecflow_port_tx_bytes_total",
                                   "Bytes of the packets a port queue accepted for transmission",
                                   MetricType::Counter,
                                   {"port", "queue"}};
inline const MetricFamily kKernelPackets{
    "vecflow_port_kernel_packets_total",
    "Packets a port handed to the kernel stack through its exception path",
    MetricType::Counter,
    {"port", "queue"}};
inline const MetricFamily kKernelBytes{"vecflow_port_kernel_bytes_total",
                                       "Bytes a port handed to the kernel stack",
                                       MetricType::Counter,
                                       {"port", "queue"}};
inline const MetricFamily kTxRefused{
    "vecflow_port_tx_refused_total",
    "Packets offered to a tx queue and not taken (ring full); the sender retries or drops them",
    MetricType::Counter,
    {"port", "queue"}};
inline const MetricFamily kTxCopies{
    "vecflow_port_tx_copies_total",
    "Packets a port copied into a fresh buffer because they could not leave as they were",
    MetricType::Counter,
    {"port", "queue"}};
inline const MetricFamily kRxSleeps{"vecflow_port_rx_sleeps_total",
                                    "Times the poller of an rx queue slept on its wake-up",
                                    MetricType::Counter,
                                    {"port", "queue"}};
// A queue's counters under {port, queue}. An rx queue's drops go to kRxDrops by reason, and
// `sleeping` is a state (`ports` WAKE).
constexpr auto kRxQueueCounters = std::to_array<CounterField<RxQueueCounts>>({
    {"rx_packets", &kRxPackets, &RxQueueCounts::packets},
    {"rx_bytes", &kRxBytes, &RxQueueCounts::bytes},
    {"sleeps", &kRxSleeps, &RxQueueCounts::sleeps},
});
static_assert(covers_struct(kRxQueueCounters,
                            sizeof(RxQueueCounts::sleeping) + sizeof(RxQueueCounts::drops)));
constexpr auto kTxQueueCounters = std::to_array<CounterField<TxQueueCounts>>({
    {"tx_packets", &kTxPackets, &TxQueueCounts::packets},
    {"tx_bytes", &kTxBytes, &TxQueueCounts::bytes},
    {"tx_refused", &kTxRefused, &TxQueueCounts::refused},
    {"tx_copies", &kTxCopies, &TxQueueCounts::copies},
    {"kernel_packets", &kKernelPackets, &TxQueueCounts::to_kernel},
    {"kernel_bytes", &kKernelBytes, &TxQueueCounts::to_kernel_bytes},
});
static_assert(covers_struct(kTxQueueCounters));
// What a queue index without counters (a port with fewer rx queues than tx, or the reverse)
// counts.
const RxQueueCounts kNoRxCounts{};
const TxQueueCounts kNoTxCounts{};
inline const MetricFamily kRxDrops{
    "vecflow_port_rx_drops_total",
    "Frames a port queue received and dropped before handing them on, by reason",
    MetricType::Counter,
    {"port", "queue", "reason"}};
inline const MetricFamily kKernelBuffers{
    "vecflow_port_kernel_buffers",
    "Pool buffers an AF_XDP socket lends to the kernel now (fill ring, unread and unsent frames)",
    MetricType::Gauge,
    {"port", "queue"}};
inline const MetricFamily kQueueInfo{
    "vecflow_port_queue_info",
    "Who reads a port queue and how frames reach its buffers (value is 1)",
    MetricType::Gauge,
    {"port", "queue", "device_queue", "owner", "mode", "served_by"}};
inline const MetricFamily kLinkUp{
    "vecflow_port_link_up", "1 if a port's link is up, else 0", MetricType::Gauge, {"port"}};
inline const MetricFamily kMtu{"vecflow_port_mtu_bytes",
                               "The MTU of a port's link as the data path uses it: the largest "
                               "IP packet it sends there (65535: unknown, no limit)",
                               MetricType::Gauge,
                               {"port"}};
inline const MetricFamily kPortInfo{"vecflow_port_info",
                                    "A port's kind and device (value is 1)",
                                    MetricType::Gauge,
                                    {"port", "kind", "device"}};
// The driver's own counters, as it names them (DPDK xstats, AF_XDP statistics), one family per
// unit: those in bytes, and the rest (packets, errors, descriptors: counts of things).
inline const MetricFamily kDeviceBytes{
    "vecflow_port_device_bytes_total",
    "A port driver's own byte counters, as it names them (DPDK xstats *_bytes)",
    MetricType::Counter,
    {"port", "name"}};
inline const MetricFamily kDeviceCounts{
    "vecflow_port_device_events_total",
    "A port driver's own counters of packets, errors and descriptors, as it names them (DPDK "
    "xstats, AF_XDP statistics)",
    MetricType::Counter,
    {"port", "name"}};

const MetricFamily& device_family(std::string_view stat) {
  return stat.find("bytes") != std::string_view::npos ? kDeviceBytes : kDeviceCounts;
}

// A queue's label: its index as rx_burst/tx_burst take it.
std::string queue_label(uint16_t q) {
  return std::to_string(q);
}

void collect_port(Snapshot& s, const Port& src, const PortMtuTable* mtus) {
  const PortStatus st = src.status();
  const std::string& p = st.name;
  s.set(kLinkUp, {p}, st.link == LinkState::Up ? 1 : 0);
  if (mtus) s.set(kMtu, {p}, mtus->get(to_index(st.id)));
  s.set(kPortInfo, {p, st.kind, st.device}, 1);
  for (const QueueStatus& q : st.queues) {
    std::string ql = queue_label(q.index);
    add_counters(s, kRxQueueCounters,
                 q.index < src.counted_rx_queues() ? src.rx_counters(q.index) : kNoRxCounts,
                 {p, ql});
    add_counters(s, kTxQueueCounters,
                 q.index < src.counted_tx_queues() ? src.tx_counters(q.index) : kNoTxCounts,
                 {p, ql});
    s.set(kKernelBuffers, {p, ql}, static_cast<double>(q.kernel_buffers));
    s.set(
        kQueueInfo,
        {p, ql, std::to_string(q.device_queue), to_string(q.owner), to_string(q.copy), q.served_by},
        1);
    for (const auto& [reason, count] : q.drops)
      s.add(kRxDrops, {p, ql, drop_reason_name(reason)}, count);
  }
  // Every reason either layer can count, zero or not, so that rates exist from the first
  // sample on and a dashboard sees the series before the first drop.
  std::array<uint64_t, kDropReasonCount> port{}, device{};
  for (const QueueStatus& q : st.queues) {
    for (const auto& [reason, count] : q.drops)
      port[static_cast<size_t>(reason)] += count;
  }
  for (const auto& [reason, count] : st.device_drops)
    device[static_cast<size_t>(reason)] += count;
  for (size_t r = 0; r < kDropReasonCount; ++r) {
    const auto reason = static_cast<DropReason>(r);
    auto name = drop_reason_name(reason);
    if (port[r] || drop_possible(DropLayer::Port, reason))
      s.add(kDrops, {p, name, "port"}, port[r]);
    if (device[r] || drop_possible(DropLayer::Device, reason))
      s.add(kDrops, {p, name, "device"}, device[r]);
  }
  for (const auto& [name, value] : st.device_stats)
    s.add(device_family(name), {p, name}, value);
}

// "zero-copy", "copy", or "zero-copy+copy" when queues of one port differ.
std::string copy_modes(const PortStatus& st) {
  bool zc = false, copy = false;
  for (const QueueStatus& q : st.queues) {
    (q.copy == CopyMode::ZeroCopy ? zc : copy) = true;
  }
  if (zc && copy) return "zero-copy+copy";
  return copy ? "copy" : "zero-copy";
}

Json queue_row(const Snapshot& s, const RateWindow& rates, const PortStatus& st,
               const QueueStatus& q) {
  const std::string& p = st.name;
  std::string ql = queue_label(q.index);
  uint64_t dropped = 0;
  for (const auto& drop : q.drops)
    dropped += s.count(kRxDrops, {p, ql, drop_reason_name(drop.first)});
  Json row{{"port", p},
           {"queue", q.index},
           {"device_queue", q.device_queue},
           {"owner", to_string(q.owner)},
           {"served_by", q.served_by},
           {"mode", to_string(q.copy)},
           {"wake", to_string(q.wake)},
           {"can_sleep", q.can_sleep},
           {"busy_poll", q.busy_poll}};
  add_counters_json(row, s, kRxQueueCounters, {p, ql});
  add_counters_json(row, s, kTxQueueCounters, {p, ql});
  row["rx_pps"] = number_or_null(rates.rate(kRxPackets, {p, ql}));
  row["rx_bps"] = bits_or_null(rates.rate(kRxBytes, {p, ql}));
  row["tx_pps"] = number_or_null(rates.rate(kTxPackets, {p, ql}));
  row["tx_bps"] = bits_or_null(rates.rate(kTxBytes, {p, ql}));
  row["kernel_pps"] = number_or_null(rates.rate(kKernelPackets, {p, ql}));
  row["rx_dropped"] = dropped;
  row["kernel_buffers"] = q.kernel_buffers;
  return row;
}

Json port_row(const Snapshot& s, const RateWindow& rates, const PortStatus& st) {
  const std::string& p = st.name;
  LabelMatch port{{"port", p}};
  auto sum = [&](const MetricFamily& f) { return static_cast<uint64_t>(s.sum(f, port)); };
  Json info = Json::object();
  for (const auto& [k, v] : st.device_info)
    info[k] = v;
  return Json{
      {"port", p},
      {"id", to_index(st.id)},
      {"kind", st.kind},
      {"device", st.device},
      {"link", to_string(st.link)},
      {"mtu", static_cast<uint64_t>(s.sum(kMtu, port))},
      {"mac", st.mac.to_string()},
      {"kernel_path", st.kernel_path},
      {"queues", st.queues.size()},
      {"mode", copy_modes(st)},
      {"rx_packets", sum(kRxPackets)},
      {"rx_bytes", sum(kRxBytes)},
      {"rx_pps", number_or_null(rates.rate_sum(kRxPackets, port))},
      {"rx_bps", bits_or_null(rates.rate_sum(kRxBytes, port))},
      {"tx_packets", sum(kTxPackets)},
      {"tx_bytes", sum(kTxBytes)},
      {"tx_pps", number_or_null(rates.rate_sum(kTxPackets, port))},
      {"tx_bps", bits_or_null(rates.rate_sum(kTxBytes, port))},
      {"kernel_packets", sum(kKernelPackets)},
      {"kernel_bytes", sum(kKernelBytes)},
      {"kernel_pps", number_or_null(rates.rate_sum(kKernelPackets, port))},
      {"tx_refused", sum(kTxRefused)},
      {"tx_copies", sum(kTxCopies)},
      {"rx_dropped", static_cast<uint64_t>(s.sum(kDrops, {{"port", p}, {"layer", "port"}}))},
      {"device_dropped", static_cast<uint64_t>(s.sum(kDrops, {{"port", p}, {"layer", "device"}}))},
      {"drop_pps", number_or_null(rates.rate_sum(kDrops, {{"port", p}, {"layer", "port"}}))},
      {"device_info", std::move(info)}};
}

// The drops a port counted, per queue and in its device.
void add_drop_rows(Json& rows, const Snapshot& s, const RateWindow& rates, const PortStatus& st) {
  const std::string& p = st.name;
  for (const QueueStatus& q : st.queues) {
    std::string ql = queue_label(q.index);
    for (const auto& drop : q.drops) {
      auto name = drop_reason_name(drop.first);
      rows.push_back({{"port", p},
                      {"where", "queue " + ql},
                      {"reason", name},
                      {"count", s.count(kRxDrops, {p, ql, name})},
                      {"pps", number_or_null(rates.rate(kRxDrops, {p, ql, name}))}});
    }
  }
  for (const auto& drop : st.device_drops) {
    auto name = drop_reason_name(drop.first);
    rows.push_back({{"port", p},
                    {"where", "device"},
                    {"reason", name},
                    {"count", s.count(kDrops, {p, name, "device"})},
                    {"pps", number_or_null(rates.rate(kDrops, {p, name, "device"}))}});
  }
}

void add_device_stat_rows(Json& rows, const Snapshot& s, const RateWindow& rates,
                          const PortStatus& st) {
  const std::string& p = st.name;
  for (const auto& stat : st.device_stats) {
    const std::string& name = stat.first;
    rows.push_back({{"port", p},
                    {"name", name},
                    {"value", s.count(device_family(name), {p, name})},
                    {"rate", number_or_null(rates.rate(device_family(name), {p, name}))}});
  }
}

View ports_view() {
  return View{{table("ports", "/ports",
                     {{"PORT", "port"},
                      {"KIND", "kind"},
                      {"DEVICE", "device"},
                      {"LINK", "link"},
                      {"MTU", "mtu"},
                      {"QUEUES", "queues"},
                      {"MODE", "mode"},
                      {"RX", "rx_packets", Unit::Count},
                      {"RX RATE", "rx_pps", Unit::Pps},
                      {"RX BITS", "rx_bps", Unit::Bps},
                      {"TX", "tx_packets", Unit::Count},
                      {"TX RATE", "tx_pps", Unit::Pps},
                      {"TX BITS", "tx_bps", Unit::Bps},
                      {"KERNEL", "kernel_packets", Unit::Count},
                      {"RX DROPS", "rx_dropped", Unit::Count},
                      {"DEVICE DROPS", "device_dropped", Unit::Count}}),
               table("queues", "/queues",
                     {{"PORT", "port"},
                      {"QUEUE", "queue"},
                      {"DEV QUEUE", "device_queue"},
                      {"OWNER", "owner"},
                      {"SERVED BY", "served_by"},
                      {"MODE", "mode"},
                      {"WAKE", "wake"},
                      {"RX", "rx_packets", Unit::Count},
                      {"RX RATE", "rx_pps", Unit::Pps},
                      {"TX", "tx_packets", Unit::Count},
                      {"TX RATE", "tx_pps", Unit::Pps},
                      {"KERNEL", "kernel_packets", Unit::Count},
                      {"REFUSED", "tx_refused", Unit::Count},
                      {"COPIES", "tx_copies", Unit::Count},
                      {"DROPS", "rx_dropped", Unit::Count}}),
               table("drops", "/drops",
                     {{"PORT", "port"},
                      {"WHERE", "where"},
                      {"REASON", "reason"},
                      {"COUNT", "count", Unit::Count},
                      {"RATE", "pps", Unit::Pps}},
                     "/count"),
               table("device counters", "/device_stats",
                     {{"PORT", "port"},
                      {"COUNTER", "name"},
                      {"VALUE", "value", Unit::Count},
                      {"PER SECOND", "rate", Unit::Count}},
                     "/value")}};
}

// `ports`: per port and queue, the counters of the last snapshot and their rates.
void register_ports_command(Registry& registry, const PortList& ports) {
  (void)registry.add_command(Command{
      &kPortsSpec,
      [ports](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        auto only = a.string("port");
        std::string names;
        for (const Port* port : ports())
          names += fmt::format("{}{}", names.empty() ? "" : ", ", port->name());
        const Snapshot& s = ctx.snapshot;
        const RateWindow& rates = ctx.rates;
        Json port_rows = Json::array();
        Json queue_rows = Json::array();
        Json drops = Json::array();
        Json stats = Json::array();
        bool found = false;
        for (const Port* port : ports()) {
          if (only && port->name() != *only) continue;
          found = true;
          PortStatus st = port->status();
          port_rows.push_back(port_row(s, rates, st));
          for (const QueueStatus& q : st.queues)
            queue_rows.push_back(queue_row(s, rates, st, q));
          add_drop_rows(drops, s, rates, st);
          add_device_stat_rows(stats, s, rates, st);
        }
        if (only && !found) {
          return command_error(ErrorCode::BadArguments, "no port '{}'; ports: {}", *only, names);
        }
        return Json{{"interval_s", rates.interval_s()},
                    {"ports", std::move(port_rows)},
                    {"queues", std::move(queue_rows)},
                    {"drops", std::move(drops)},
                    {"device_stats", std::move(stats)}};
      },
      ports_view()});
}

Json hardware_row(const Port& port) {
  const PortHardware h = port.hardware();
  auto or_null = [](auto v, auto none) { return v == none ? Json() : Json(v); };
  std::string offloads;
  for (const auto& o : h.offloads)
    offloads += (offloads.empty() ? "" : " ") + o;
  return Json{{"port", port.name()},
              {"kind", port.kind()},
              {"mac", port.mac().to_string()},
              {"driver", h.driver},
              {"bus", h.bus},
              {"numa_node", or_null(h.numa_node, -1)},
              {"speed_mbps", or_null(h.speed_mbps, 0u)},
              {"mtu", or_null(h.mtu, 0u)},
              {"rx_queues", h.rx_queues},
              {"rx_queues_max", h.rx_queues_max},
              {"tx_queues", h.tx_queues},
              {"tx_queues_max", h.tx_queues_max},
              {"queues", fmt::format("{}/{} rx {}/{} tx", h.rx_queues, h.rx_queues_max, h.tx_queues,
                                     h.tx_queues_max)},
              {"offloads", h.offloads},
              {"offload_list", offloads},
              {"xdp_mode", h.xdp_mode},
              {"xdp_program_id", or_null(h.xdp_program_id, 0u)},
              {"xdp_program", h.xdp_program},
              {"xdp", h.xdp_mode.empty() ? std::string("-")
                                         : fmt::format("{} {} (id {})", h.xdp_mode, h.xdp_program,
                                                       h.xdp_program_id)}};
}

// `hardware`: what each port's device is, read from the device when asked.
void register_hardware_command(Registry& registry, const PortList& ports) {
  (void)registry.add_command(Command{
      &kHardwareSpec,
      [ports](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const auto only = a.string("port");
        Json rows = Json::array();
        std::string names;
        for (const Port* port : ports()) {
          names += (names.empty() ? "" : ", ") + port->name();
          if (only && *only != port->name()) continue;
          rows.push_back(hardware_row(*port));
        }
        if (only && rows.empty()) {
          return command_error(ErrorCode::BadArguments, "no port '{}'; ports: {}", *only, names);
        }
        return Json{{"ports", std::move(rows)}};
      },
      View{{table("", "/ports",
                  {{"PORT", "port"},
                   {"DRIVER", "driver"},
                   {"BUS", "bus"},
                   {"NUMA", "numa_node"},
                   {"MBIT/S", "speed_mbps"},
                   {"MTU", "mtu"},
                   {"QUEUES", "queues"},
                   {"XDP", "xdp"},
                   {"OFFLOADS", "offload_list"}})}}});
}

}  // namespace

std::vector<CounterTableInfo> ports_counter_tables() {
  return {describe("RxQueueCounts", kRxQueueCounters), describe("TxQueueCounts", kTxQueueCounters)};
}

void register_ports(Registry& registry, PortList ports, const PortMtuTable* mtus) {
  registry.add_collector("ports", [ports, mtus](Snapshot& s) {
    for (const Port* port : ports())
      collect_port(s, *port, mtus);
  });

  registry.add_status("ports", [ports](const CommandContext&) {
    Json rows = Json::array();
    for (const Port* port : ports()) {
      PortStatus st = port->status();
      rows.push_back({{"name", st.name},
                      {"type", st.kind},
                      {"interface", st.device},
                      {"state", to_string(st.link)},
                      {"queues", st.queues.size()},
                      {"mode", copy_modes(st)}});
    }
    return rows;
  });

  register_ports_command(registry, ports);
  register_hardware_command(registry, ports);
}

}  // namespace vecflow::control
