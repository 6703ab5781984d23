#include "control/parts/sched_part.h"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <rte_lcore.h>

#include "api/counter_table.h"
#include "api/families.h"
#include "api/values.h"
#include "control/command_specs.h"
#include "core/wait_histogram.h"
#include "runtime/cycles.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kInfo{"vecflow_sched_info",
                                "The scheduler backend in use (value is 1)",
                                MetricType::Gauge,
                                {"backend"}};
inline const MetricFamily kInflight{"vecflow_sched_inflight_events",
                                    "Events admitted to the scheduler and not yet released",
                                    MetricType::Gauge,
                                    {}};
inline const MetricFamily kMigrations{
    "vecflow_sched_migrations_total",
    "Flows the builtin scheduler moved from one worker to another",
    MetricType::Counter,
    {}};
inline const MetricFamily kQueueEnqueued{"vecflow_sched_queue_enqueued_total",
                                         "Events enqueued to a scheduler queue (a pipeline stage)",
                                         MetricType::Counter,
                                         {"queue"}};
inline const MetricFamily kQueueDequeued{"vecflow_sched_queue_dequeued_total",
                                         "Events of a scheduler queue dequeued by workers",
                                         MetricType::Counter,
                                         {"queue"}};
// Scheduler ports: `role` producer (an rx adapter) or worker, `port` the index in the role.
inline const MetricFamily kPortEnqueued{"vecflow_sched_port_enqueued_total",
                                        "Events a scheduler port enqueued, by operation",
                                        MetricType::Counter,
                                        {"role", "port", "op"}};
inline const MetricFamily kPortRefused{
    "vecflow_sched_port_refused_total",
    "Events a scheduler port offered and the scheduler refused (backpressure)",
    MetricType::Counter,
    {"role", "port"}};
inline const MetricFamily kPortDequeued{"vecflow_sched_port_dequeued_total",
                                        "Events a worker port dequeued",
                                        MetricType::Counter,
                                        {"role", "port"}};
inline const MetricFamily kPortDequeueCalls{"vecflow_sched_port_dequeue_calls_total",
                                            "Dequeue calls of a worker port",
                                            MetricType::Counter,
                                            {"role", "port"}};
inline const MetricFamily kPortEmptyDequeues{"vecflow_sched_port_empty_dequeues_total",
                                             "Dequeue calls of a worker port that found nothing",
                                             MetricType::Counter,
                                             {"role", "port"}};
inline const MetricFamily kPortEmigrations{"vecflow_sched_port_emigrations_total",
                                           "Flows a worker port handed to another (builtin)",
                                           MetricType::Counter,
                                           {"role", "port"}};
inline const MetricFamily kPortImmigrations{"vecflow_sched_port_immigrations_total",
                                            "Flows a worker port received from another (builtin)",
                                            MetricType::Counter,
                                            {"role", "port"}};
// The scheduler's counters (a copy its backend fills in stats()), each table under the labels
// its collector gives. The rest of each struct is identity and gauges, counted by size.
constexpr auto kSchedulerCounters = std::to_array<CounterField<sched::SchedulerStats, uint64_t>>(
    {{"migrations", &kMigrations, &sched::SchedulerStats::migrations}});
static_assert(covers_struct(kSchedulerCounters, offsetof(sched::SchedulerStats, inflight) +
                                                    sizeof(sched::SchedulerStats::inflight)));
// A queue's, under {queue}.
constexpr auto kQueueCounters = std::to_array<CounterField<sched::QueueStats, uint64_t>>({
    {"in", &kQueueEnqueued, &sched::QueueStats::enqueued},
    {"out", &kQueueDequeued, &sched::QueueStats::dequeued},
});
static_assert(covers_struct(kQueueCounters, offsetof(sched::QueueStats, enqueued)));
// Every port's, under {role, port}; a worker port's also kWorkerPortCounters.
constexpr auto kPortCounters = std::to_array<CounterField<sched::PortStats, uint64_t>>({
    {"enq_new", &kPortEnqueued, &sched::PortStats::enq_new, "new"},
    {"enq_forward", &kPortEnqueued, &sched::PortStats::enq_forward, "forward"},
    {"enq_release", &kPortEnqueued, &sched::PortStats::enq_release, "release"},
    {"refused", &kPortRefused, &sched::PortStats::refused},
});
constexpr auto kWorkerPortCounters = std::to_array<CounterField<sched::PortStats, uint64_t>>({
    {"dequeued", &kPortDequeued, &sched::PortStats::dequeued},
    {"dequeue_calls", &kPortDequeueCalls, &sched::PortStats::dequeue_calls},
    {"empty_dequeues", &kPortEmptyDequeues, &sched::PortStats::empty_dequeues},
    {"emigrations", &kPortEmigrations, &sched::PortStats::emigrations},
    {"immigrations", &kPortImmigrations, &sched::PortStats::immigrations},
});
static_assert(covers_struct(kWorkerPortCounters, offsetof(sched::PortStats, enq_new) +
                                                     kPortCounters.size() * sizeof(uint64_t) +
                                                     sizeof(sched::PortStats::load_permille) +
                                                     sizeof(sched::PortStats::backlog) +
                                                     sizeof(sched::PortStats::backlog_packets)));
inline const MetricFamily kPortLoad{"vecflow_sched_port_load_ratio",
                                    "Share of time a worker port's worker was busy, as the "
                                    "builtin scheduler measures it for migrations (0..1)",
                                    MetricType::Gauge,
                                    {"role", "port"}};
inline const MetricFamily kPortBacklog{"vecflow_sched_port_backlog_events",
                                       "Events waiting in a worker port's input ring (builtin)",
                                       MetricType::Gauge,
                                       {"role", "port"}};
inline const MetricFamily kPortBacklogPackets{
    "vecflow_sched_port_backlog_packets",
    "Packets sent to a worker port and not yet dequeued (builtin, with a backlog limit)",
    MetricType::Gauge,
    {"role", "port"}};

inline const MetricFamily kSchedRxPackets{"vecflow_sched_rx_packets_total",
                                          "Packets an rx adapter received from its port queues",
                                          MetricType::Counter,
                                          {"adapter"}};
inline const MetricFamily kRxEvents{"vecflow_sched_rx_events_total",
                                    "Events an rx adapter enqueued (vectors and single packets)",
                                    MetricType::Counter,
                                    {"adapter"}};
inline const MetricFamily kRxVectors{"vecflow_sched_rx_vectors_total",
                                     "Vectors an rx adapter formed and enqueued",
                                     MetricType::Counter,
                                     {"adapter"}};
inline const MetricFamily kRxVectorPackets{"vecflow_sched_rx_vector_packets_total",
                                           "Packets in the vectors an rx adapter enqueued",
                                           MetricType::Counter,
                                           {"adapter"}};
inline const MetricFamily kRxClosed{
    "vecflow_sched_rx_vectors_closed_total",
    "Vectors enqueued, by why they closed: full, drained (the rx queue was empty), timeout, "
    "flush (queue removed, shutdown)",
    MetricType::Counter,
    {"adapter", "why"}};
inline const MetricFamily kRxWait{
    "vecflow_sched_rx_vector_wait_seconds",
    "Time packets waited in an rx adapter's vectors, from their receive to their vector's "
    "enqueue",
    MetricType::Histogram,
    {"adapter", "le"}};
// The wait histogram's buckets: 1-2-5 steps from 1 us (a vector closed in the poll that
// received its packets) to 10 ms (well past any vector timeout worth setting).
constexpr std::array<double, 13> kWaitBounds = {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4,
                                                2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2};
inline const MetricFamily kRxNoVector{
    "vecflow_sched_rx_no_vector_total",
    "Packets an rx adapter sent alone because its vector pool was empty",
    MetricType::Counter,
    {"adapter"}};
inline const MetricFamily kRxHeld{
    "vecflow_sched_rx_held_polls_total",
    "Polls in which an rx adapter left its rx queues alone because the scheduler had no room",
    MetricType::Counter,
    {"adapter"}};
inline const MetricFamily kRxRefused{
    "vecflow_sched_rx_refused_total",
    "Events the scheduler refused from an rx adapter (packets dropped as sched_backpressure)",
    MetricType::Counter,
    {"adapter"}};
// An rx adapter's counters under {adapter}; its wait histogram goes to kRxWait (add_wait).
constexpr auto kRxAdapterCounters = std::to_array<CounterField<sched::RxAdapterStats>>({
    {"packets", &kSchedRxPackets, &sched::RxAdapterStats::packets},
    {"events", &kRxEvents, &sched::RxAdapterStats::events},
    {"vectors", &kRxVectors, &sched::RxAdapterStats::vectors},
    {"vector_packets", &kRxVectorPackets, &sched::RxAdapterStats::vector_packets},
    {"closed_full", &kRxClosed, &sched::RxAdapterStats::closed_full, "full"},
    {"closed_drained", &kRxClosed, &sched::RxAdapterStats::closed_drained, "drained"},
    {"closed_timeout", &kRxClosed, &sched::RxAdapterStats::closed_timeout, "timeout"},
    {"closed_flush", &kRxClosed, &sched::RxAdapterStats::closed_flush, "flush"},
    {"no_vector", &kRxNoVector, &sched::RxAdapterStats::no_vector},
    {"refused", &kRxRefused, &sched::RxAdapterStats::refused},
    {"held_polls", &kRxHeld, &sched::RxAdapterStats::held},
});
static_assert(covers_struct(kRxAdapterCounters, sizeof(WaitHistogram)));

inline const MetricFamily kWorkerEvents{"vecflow_sched_worker_events_total",
                                        "Events a worker dequeued and ran through the pipeline",
                                        MetricType::Counter,
                                        {"worker"}};
inline const MetricFamily kWorkerForwarded{"vecflow_sched_worker_forwarded_total",
                                           "Events a worker forwarded to another stage's queue",
                                           MetricType::Counter,
                                           {"worker"}};
inline const MetricFamily kWorkerFinished{"vecflow_sched_worker_finished_total",
                                          "Events a worker finished (handed to its tx adapter)",
                                          MetricType::Counter,
                                          {"worker"}};
inline const MetricFamily kWorkerViaEgress{
    "vecflow_sched_worker_via_egress_total",
    "Finished events of ordered stages a worker sent through the egress queue",
    MetricType::Counter,
    {"worker"}};
inline const MetricFamily kWorkerRefused{
    "vecflow_sched_worker_refused_total",
    "Forwards the scheduler refused after retries (packets dropped as sched_backpressure)",
    MetricType::Counter,
    {"worker"}};
// A worker's counters under {worker}.
constexpr auto kWorkerCounters = std::to_array<CounterField<sched::WorkerStats>>({
    {"events", &kWorkerEvents, &sched::WorkerStats::events},
    {"forwarded", &kWorkerForwarded, &sched::WorkerStats::forwarded},
    {"finished", &kWorkerFinished, &sched::WorkerStats::finished},
    {"via_egress", &kWorkerViaEgress, &sched::WorkerStats::via_egress},
    {"refused", &kWorkerRefused, &sched::WorkerStats::refused},
});
static_assert(covers_struct(kWorkerCounters));

inline const MetricFamily kTxBursts{"vecflow_sched_tx_bursts_total",
                                    "Port tx bursts of a worker's tx adapter",
                                    MetricType::Counter,
                                    {"worker"}};
inline const MetricFamily kTxRetries{"vecflow_sched_tx_retries_total",
                                     "Tx bursts repeated for the part a port refused",
                                     MetricType::Counter,
                                     {"worker"}};
inline const MetricFamily kTxFull{"vecflow_sched_tx_full_total",
                                  "Packets a worker's tx adapter dropped after retries (tx_full)",
                                  MetricType::Counter,
                                  {"worker"}};
inline const MetricFamily kTxFragmented{
    "vecflow_sched_tx_fragmented_total",
    "IPv4 packets a worker's tx adapter cut into fragments to fit their egress port's MTU",
    MetricType::Counter,
    {"worker"}};
inline const MetricFamily kTxFragments{
    "vecflow_sched_tx_fragments_total",
    "Fragments a worker's tx adapter made of them (fragments out)",
    MetricType::Counter,
    {"worker"}};
inline const MetricFamily kTxCopiesDropped{
    "vecflow_sched_tx_copies_dropped_total",
    "Packets vecflowd made (mirror copies, ICMP errors, later fragments) that a worker's tx "
    "adapter dropped because a port refused them; charged to no port",
    MetricType::Counter,
    {"worker"}};
// A tx adapter's counters, under the name of the worker or direct path it sends for.
constexpr auto kTxCounters = std::to_array<CounterField<sched::TxStats>>({
    {"tx_bursts", &kTxBursts, &sched::TxStats::bursts},
    {"tx_retries", &kTxRetries, &sched::TxStats::retries},
    {"tx_full", &kTxFull, &sched::TxStats::tx_full},
    {"copies_dropped", &kTxCopiesDropped, &sched::TxStats::copies_dropped},
    {"fragmented", &kTxFragmented, &sched::TxStats::fragmented},
    {"fragments_out", &kTxFragments, &sched::TxStats::fragments},
});
static_assert(covers_struct(kTxCounters));

inline const MetricFamily kDirectPackets{
    "vecflow_sched_direct_packets_total",
    "Packets a direct path received (one worker running the pipeline without the scheduler)",
    MetricType::Counter,
    {"service"}};
inline const MetricFamily kDirectRuns{"vecflow_sched_direct_runs_total",
                                      "Pipeline runs of a direct path (packets / runs: the mean)",
                                      MetricType::Counter,
                                      {"service"}};

std::string_view role_name(sched::PortRole r) {
  return r == sched::PortRole::Producer ? "producer" : "worker";
}

// The lcore a service runs on, from the runtime's service series; "" when it is on none (or
// the runtime's counters are not registered).
std::string lcore_of(const Snapshot& s, const std::string& service) {
  if (const auto* fam = s.find(kServiceBusy.name)) {
    for (const auto& [labels, value] : fam->series) {
      if (labels[1] == service) return labels[0];
    }
  }
  return "";
}

void add_wait(Snapshot& s, const std::string& adapter, const WaitHistogram& h) {
  std::array<uint64_t, kWaitBounds.size() + 1> cumulative;
  const double hz = static_cast<double>(tsc_hz());
  for (size_t i = 0; i < kWaitBounds.size(); ++i)
    cumulative[i] = h.at_most(static_cast<uint64_t>(kWaitBounds[i] * hz));
  cumulative.back() = h.count();
  s.add_histogram(kRxWait, {adapter}, kWaitBounds, cumulative,
                  static_cast<double>(h.sum_cycles()) / hz);
}

std::string bound_label(size_t i) {
  return i < kWaitBounds.size() ? fmt::format("{}", kWaitBounds[i]) : "+Inf";
}

// Over the last sampling interval: the mean wait, and a quantile estimated as Prometheus's
// histogram_quantile() does (linear within the bucket it falls in; in the +Inf bucket, the
// last bound). null when no packet left a vector in the interval.
Json recent_wait_mean_us(const RateWindow& rates, const std::string& adapter) {
  auto sum = rates.rate(kRxWait, {adapter, ""});
  auto count = rates.rate(kRxWait, {adapter, "+Inf"});
  if (!sum || !count || *count <= 0) return nullptr;
  return *sum / *count * 1e6;
}

Json recent_wait_quantile_us(const RateWindow& rates, const std::string& adapter, double q) {
  auto total = rates.rate(kRxWait, {adapter, "+Inf"});
  if (!total || *total <= 0) return nullptr;
  const double rank = q * *total;
  double below = 0;
  for (size_t i = 0; i < kWaitBounds.size(); ++i) {
    auto at = rates.rate(kRxWait, {adapter, bound_label(i)});
    if (!at) return nullptr;
    if (*at >= rank) {
      const double lo = i == 0 ? 0 : kWaitBounds[i - 1];
      const double share = *at > below ? (rank - below) / (*at - below) : 1;
      return (lo + (kWaitBounds[i] - lo) * share) * 1e6;
    }
    below = *at;
  }
  return kWaitBounds.back() * 1e6;
}

Json service_share(const RateWindow& rates, const MetricFamily& f, const std::string& service) {
  return tsc_percent(rates.rate_sum(f, {{"service", service}}));
}

// What the sched part reads, owned by the app (register_sched says so). The collector and
// the `sched` command each keep a copy.
struct SchedSources {
  const sched::Scheduler* scheduler;
  std::vector<const sched::RxAdapter*> rx_adapters;
  std::vector<const sched::Worker*> workers;
  std::vector<const sched::TxAdapter*> tx_adapters;
  std::vector<DirectPathView> direct;
};

void collect_direct(Snapshot& s, const std::vector<DirectPathView>& direct) {
  for (const DirectPathView& d : direct) {
    s.add(kDirectPackets, {d.name}, d.packets->load());
    s.add(kDirectRuns, {d.name}, d.runs->load());
    add_counters(s, kTxCounters, *d.tx, {d.name});
  }
}

// The scheduler's own counters: its queues and the ports the adapters and workers use.
void collect_scheduler(Snapshot& s, const sched::Scheduler& scheduler) {
  sched::SchedulerStats st = scheduler.stats();
  s.set(kInfo, {st.backend}, 1);
  s.set(kInflight, {}, static_cast<double>(st.inflight));
  add_counters(s, kSchedulerCounters, st, {});
  for (const auto& q : st.queues)
    add_counters(s, kQueueCounters, q, {q.name});
  for (const auto& p : st.ports) {
    auto role = role_name(p.role);
    std::string idx = std::to_string(p.index);
    add_counters(s, kPortCounters, p, {role, idx});
    if (p.role != sched::PortRole::Worker) continue;
    add_counters(s, kWorkerPortCounters, p, {role, idx});
    s.set(kPortLoad, {role, idx}, p.load_permille / 1000.0);
    s.set(kPortBacklog, {role, idx}, p.backlog);
    s.set(kPortBacklogPackets, {role, idx}, static_cast<double>(p.backlog_packets));
  }
}

void collect_rx_adapter(Snapshot& s, const sched::RxAdapter& rx) {
  add_counters(s, kRxAdapterCounters, rx.adapter_stats(), {rx.name()});
  add_wait(s, rx.name(), rx.adapter_stats().wait);
}

// A worker's counters, and its tx adapter's (`tx` null when it has none) under its name.
void collect_worker(Snapshot& s, const sched::Worker& worker, const sched::TxAdapter* tx) {
  add_counters(s, kWorkerCounters, worker.worker_stats(), {worker.name()});
  if (tx) add_counters(s, kTxCounters, tx->stats(), {worker.name()});
}

void collect_sched(Snapshot& s, const SchedSources& src) {
  collect_direct(s, src.direct);
  if (src.scheduler == nullptr) return;
  collect_scheduler(s, *src.scheduler);
  for (const sched::RxAdapter* rx : src.rx_adapters)
    collect_rx_adapter(s, *rx);
  for (size_t i = 0; i < src.workers.size(); ++i)
    collect_worker(s, *src.workers[i], i < src.tx_adapters.size() ? src.tx_adapters[i] : nullptr);
}

// `lcore=N` of `sched`: whether what runs on `lcore` ("" for none) is shown.
bool on_lcore(const std::optional<uint64_t>& only, const std::string& lcore) {
  return !only || lcore == std::to_string(*only);
}

Json direct_row(const Snapshot& s, const RateWindow& rates, const DirectPathView& d,
                const std::string& lcore) {
  const uint64_t packets = s.count(kDirectPackets, {d.name});
  const uint64_t runs = s.count(kDirectRuns, {d.name});
  auto pkt_rate = rates.rate(kDirectPackets, {d.name});
  auto run_rate = rates.rate(kDirectRuns, {d.name});
  Json row{{"service", d.name},
           {"lcore", lcore},
           {"busy_pct", service_share(rates, kServiceBusy, d.name)},
           {"idle_pct", service_share(rates, kServiceIdle, d.name)},
           {"packets", packets},
           {"pps", number_or_null(pkt_rate)},
           {"runs", runs},
           {"mean_run",
            runs ? Json(static_cast<double>(packets) / static_cast<double>(runs)) : Json(nullptr)},
           {"recent_mean_run",
            run_rate && *run_rate > 0 && pkt_rate ? Json(*pkt_rate / *run_rate) : Json(nullptr)}};
  add_counters_json(row, s, kTxCounters, {d.name});
  return row;
}

Json queue_rows(const Snapshot& s, const RateWindow& rates, const sched::Scheduler& scheduler) {
  Json queues = Json::array();
  for (uint16_t q = 0; q < scheduler.queue_count(); ++q) {
    const std::string& name = scheduler.queue(static_cast<uint8_t>(q)).name;
    Json row{{"queue", q},
             {"name", name},
             {"type", to_string(scheduler.queue_type(static_cast<uint8_t>(q)))}};
    add_counters_json(row, s, kQueueCounters, {name});
    row["in_per_s"] = number_or_null(rates.rate(kQueueEnqueued, {name}));
    row["out_per_s"] = number_or_null(rates.rate(kQueueDequeued, {name}));
    queues.push_back(std::move(row));
  }
  return queues;
}

Json rx_adapter_row(const Snapshot& s, const RateWindow& rates, const sched::RxAdapter& rx,
                    const std::string& lcore) {
  const std::string& n = rx.name();
  uint64_t vectors = s.count(kRxVectors, {n});
  uint64_t in_vectors = s.count(kRxVectorPackets, {n});
  auto vec_rate = rates.rate(kRxVectors, {n});
  auto vec_pkt_rate = rates.rate(kRxVectorPackets, {n});
  std::string producer = std::to_string(rx.producer_index());
  Json row{{"adapter", n},
           {"lcore", lcore},
           {"busy_pct", service_share(rates, kServiceBusy, n)},
           {"queues", rx.queue_count()},
           {"vector_size", rx.config().vector_size},
           {"vector_timeout_us", rx.config().vector_timeout_us},
           {"flow_buckets", rx.config().flow_buckets}};
  add_counters_json(row, s, kRxAdapterCounters, {n});
  row["pps"] = number_or_null(rates.rate(kSchedRxPackets, {n}));
  row["mean_vector"] = vectors
                           ? Json(static_cast<double>(in_vectors) / static_cast<double>(vectors))
                           : Json(nullptr);
  // Over the last sampling interval: what the adapter forms now.
  row["recent_mean_vector"] =
      vec_rate && *vec_rate > 0 && vec_pkt_rate ? Json(*vec_pkt_rate / *vec_rate) : Json(nullptr);
  row["wait_mean_us"] = recent_wait_mean_us(rates, n);
  row["wait_p99_us"] = recent_wait_quantile_us(rates, n, 0.99);
  row["sched_port_refused"] = s.count(kPortRefused, {"producer", producer});
  return row;
}

Json worker_row(const Snapshot& s, const RateWindow& rates, const sched::Worker& w,
                const std::string& lcore) {
  const std::string& n = w.name();
  std::string port = std::to_string(w.port_index());
  uint64_t events = s.count(kWorkerEvents, {n});
  const uint64_t calls = s.count(kPortDequeueCalls, {"worker", port});
  const uint64_t empty = s.count(kPortEmptyDequeues, {"worker", port});
  auto load = s.get(kPortLoad, {"worker", port});
  auto backlog = s.get(kPortBacklog, {"worker", port});
  auto backlog_packets = s.get(kPortBacklogPackets, {"worker", port});
  // A stalled lcore (runtime/lcore.h) does not run this worker: its flows wait.
  auto stalled = lcore.empty() ? std::nullopt : s.get(kLcoreStalled, {lcore});
  Json row{{"worker", n},
           {"lcore", lcore},
           {"state", stalled && stalled->as_double() > 0 ? "stalled" : "running"},
           {"sched_port", w.port_index()},
           {"busy_pct", service_share(rates, kServiceBusy, n)},
           {"idle_pct", service_share(rates, kServiceIdle, n)}};
  add_counters_json(row, s, kWorkerCounters, {n});
  row["events_per_s"] = number_or_null(rates.rate(kWorkerEvents, {n}));
  // Its scheduler port's counters: dequeue_calls, empty_dequeues, emigrations ...
  add_counters_json(row, s, kWorkerPortCounters, {"worker", port});
  row["events_per_dequeue"] =
      calls > empty ? Json(static_cast<double>(events) / static_cast<double>(calls - empty))
                    : Json(nullptr);
  row["load_pct"] = load ? Json(load->as_double() * 100) : Json(nullptr);
  row["backlog"] = backlog ? Json(backlog->as_double()) : Json(nullptr);
  row["backlog_packets"] = backlog_packets ? Json(backlog_packets->as_double()) : Json(nullptr);
  add_counters_json(row, s, kTxCounters, {n});
  return row;
}

View sched_view() {
  return View{{fields("", "",
                      {{"backend", "/backend"},
                       {"path", "/path"},
                       {"in flight", "/inflight", Unit::Count},
                       {"migrations", "/migrations", Unit::Count},
                       {"refused", "/refused", Unit::Count}}),
               table("queues", "/queues",
                     {{"QUEUE", "queue"},
                      {"NAME", "name"},
                      {"TYPE", "type"},
                      {"IN", "in", Unit::Count},
                      {"IN/S", "in_per_s", Unit::Count},
                      {"OUT", "out", Unit::Count},
                      {"OUT/S", "out_per_s", Unit::Count}}),
               table("rx adapters", "/rx_adapters",
                     {{"ADAPTER", "adapter"},
                      {"LCORE", "lcore"},
                      {"BUSY", "busy_pct", Unit::Percent},
                      {"PACKETS", "packets", Unit::Count},
                      {"RATE", "pps", Unit::Pps},
                      {"BUCKETS", "flow_buckets"},
                      {"VECTORS", "vectors", Unit::Count},
                      {"MEAN SIZE", "mean_vector"},
                      {"FULL", "closed_full", Unit::Count},
                      {"DRAINED", "closed_drained", Unit::Count},
                      {"TIMEOUT", "closed_timeout", Unit::Count},
                      {"FLUSH", "closed_flush", Unit::Count},
                      {"NO VECTOR", "no_vector", Unit::Count},
                      {"REFUSED", "refused", Unit::Count},
                      {"HELD", "held_polls", Unit::Count},
                      {"WAIT MEAN US", "wait_mean_us"},
                      {"WAIT P99 US", "wait_p99_us"}}),
               table("workers", "/workers",
                     {{"WORKER", "worker"},
                      {"LCORE", "lcore"},
                      {"STATE", "state"},
                      {"BUSY", "busy_pct", Unit::Percent},
                      {"IDLE", "idle_pct", Unit::Percent},
                      {"EVENTS", "events", Unit::Count},
                      {"EVENTS/S", "events_per_s", Unit::Count},
                      {"FORWARDED", "forwarded", Unit::Count},
                      {"FINISHED", "finished", Unit::Count},
                      {"MIGRATED OUT", "emigrations", Unit::Count},
                      {"MIGRATED IN", "immigrations", Unit::Count},
                      {"BACKLOG", "backlog", Unit::Count},
                      {"REFUSED", "refused", Unit::Count},
                      {"TX FULL", "tx_full", Unit::Count},
                      {"FRAGMENTS OUT", "fragments_out", Unit::Count}}),
               table("direct path", "/direct",
                     {{"SERVICE", "service"},
                      {"LCORE", "lcore"},
                      {"BUSY", "busy_pct", Unit::Percent},
                      {"IDLE", "idle_pct", Unit::Percent},
                      {"PACKETS", "packets", Unit::Count},
                      {"RATE", "pps", Unit::Pps},
                      {"RUNS", "runs", Unit::Count},
                      {"MEAN RUN", "mean_run"},
                      {"TX FULL", "tx_full", Unit::Count},
                      {"FRAGMENTS OUT", "fragments_out", Unit::Count}})}};
}

// `sched`: the scheduler's queues, rx adapters and workers, or the direct path without one.
CommandResult sched_command(const CommandContext& ctx, const SchedSources& src) {
  ArgReader a(ctx);
  // One lcore's adapters and workers; the queues and totals stay the whole scheduler's.
  const auto only = a.uint("lcore");
  const Snapshot& s = ctx.snapshot;
  const RateWindow& rates = ctx.rates;

  Json direct_rows = Json::array();
  for (const DirectPathView& d : src.direct) {
    const std::string lcore = lcore_of(s, d.name);
    if (on_lcore(only, lcore)) direct_rows.push_back(direct_row(s, rates, d, lcore));
  }
  const sched::Scheduler* scheduler = src.scheduler;
  if (scheduler == nullptr) {
    return Json{{"backend", "none"},
                {"path", "direct"},
                {"interval_s", rates.interval_s()},
                {"inflight", 0},
                {"migrations", 0},
                {"refused", 0},
                {"queues", Json::array()},
                {"rx_adapters", Json::array()},
                {"workers", Json::array()},
                {"direct", std::move(direct_rows)}};
  }

  Json adapters = Json::array();
  for (const sched::RxAdapter* rx : src.rx_adapters) {
    const std::string lcore = lcore_of(s, rx->name());
    if (on_lcore(only, lcore)) adapters.push_back(rx_adapter_row(s, rates, *rx, lcore));
  }
  Json worker_rows = Json::array();
  for (const sched::Worker* w : src.workers) {
    const std::string lcore = lcore_of(s, w->name());
    if (on_lcore(only, lcore)) worker_rows.push_back(worker_row(s, rates, *w, lcore));
  }

  auto inflight = s.get(kInflight, {});
  return Json{{"backend", std::string(scheduler->backend())},
              {"path", "scheduled"},
              {"interval_s", rates.interval_s()},
              {"inflight", inflight ? static_cast<uint64_t>(inflight->as_double()) : 0},
              {"migrations", s.count(kMigrations, {})},
              {"refused", static_cast<uint64_t>(s.sum(kPortRefused))},
              {"queues", queue_rows(s, rates, *scheduler)},
              {"rx_adapters", std::move(adapters)},
              {"workers", std::move(worker_rows)},
              {"direct", std::move(direct_rows)}};
}

}  // namespace

std::vector<CounterTableInfo> sched_counter_tables() {
  return {describe("sched::SchedulerStats", kSchedulerCounters),
          describe("sched::QueueStats", kQueueCounters),
          describe("sched::PortStats", kPortCounters),
          describe("sched::PortStats (worker)", kWorkerPortCounters),
          describe("sched::RxAdapterStats", kRxAdapterCounters),
          describe("sched::WorkerStats", kWorkerCounters),
          describe("sched::TxStats", kTxCounters)};
}

void register_sched(Registry& registry, const sched::Scheduler* scheduler,
                    std::vector<const sched::RxAdapter*> rx_adapters,
                    std::vector<const sched::Worker*> workers,
                    std::vector<const sched::TxAdapter*> tx_adapters,
                    std::vector<DirectPathView> direct) {
  const SchedSources src{scheduler, std::move(rx_adapters), std::move(workers),
                         std::move(tx_adapters), std::move(direct)};
  registry.add_collector("sched", [src](Snapshot& s) { collect_sched(s, src); });

  registry.add_status("scheduler", [scheduler, nworkers = src.workers.size(),
                                    ndirect = src.direct.size()](const CommandContext&) {
    if (scheduler == nullptr)
      return Json{{"backend", "none"}, {"path", "direct"}, {"workers", ndirect}};
    return Json{{"backend", std::string(scheduler->backend())},
                {"path", "scheduled"},
                {"queues", scheduler->queue_count()},
                {"workers", nworkers},
                {"inflight", scheduler->inflight()}};
  });

  (void)registry.add_command(
      Command{&kSchedSpec, [src](const CommandContext& ctx) { return sched_command(ctx, src); },
              sched_view()});
}

}  // namespace vecflow::control
