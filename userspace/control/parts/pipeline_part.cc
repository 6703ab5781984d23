#include "control/parts/pipeline_part.h"

#include <algorithm>
#include <set>
#include <string>

#include <rte_lcore.h>

#include "api/counter_table.h"
#include "api/values.h"
#include "control/command_specs.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/mirror_stage.h"
#include "pipeline/neighbour_table.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kStageCalls{"vecflow_stage_calls_total",
                                      "Vectors a pipeline stage processed, per lcore",
                                      MetricType::Counter,
                                      {"stage", "type", "lcore"}};
inline const MetricFamily kStagePackets{
    "vecflow_stage_packets_total",
    "Packets in the vectors a pipeline stage processed, per lcore",
    MetricType::Counter,
    {"stage", "type", "lcore"}};
inline const MetricFamily kStageCycles{
    "vecflow_stage_cycles_total",
    "TSC cycles a pipeline stage spent processing vectors, per lcore",
    MetricType::Counter,
    {"stage", "type", "lcore"}};
// A stage's counters on one lcore, under {stage, type, lcore}.
constexpr auto kStageCounters = std::to_array<CounterField<StageStats, uint64_t>>({
    {"calls", &kStageCalls, &StageStats::calls},
    {"packets", &kStagePackets, &StageStats::packets},
    {"cycles", &kStageCycles, &StageStats::cycles},
});
static_assert(covers_struct(kStageCounters));

inline const MetricFamily kMirrorMatched{"vecflow_mirror_matched_total",
                                         "Packets a mirror stage's match took",
                                         MetricType::Counter,
                                         {"stage"}};
inline const MetricFamily kMirrorCopies{
    "vecflow_mirror_copies_total",
    "Copies a mirror stage made (file: queued for the writer; port: handed on)",
    MetricType::Counter,
    {"stage"}};
inline const MetricFamily kMirrorLost{
    "vecflow_mirror_lost_total",
    "Copies a mirror stage could not make: no buffer, or the writer's ring was full",
    MetricType::Counter,
    {"stage"}};
// A mirror stage's counters under {stage}.
constexpr auto kMirrorCounters = std::to_array<CounterField<MirrorCounters, uint64_t>>({
    {"matched", &kMirrorMatched, &MirrorCounters::matched},
    {"copies", &kMirrorCopies, &MirrorCounters::copies},
    {"lost", &kMirrorLost, &MirrorCounters::lost},
});
static_assert(covers_struct(kMirrorCounters));

// What follows the kernel's routes and neighbours (pipeline/kernel_sync.h), when a stage does.
inline const MetricFamily kSyncEvents{"vecflow_kernel_sync_events_total",
                                      "Netlink messages the kernel sync handled",
                                      MetricType::Counter,
                                      {}};
inline const MetricFamily kSyncOverruns{
    "vecflow_kernel_sync_overruns_total",
    "Times netlink messages were lost and the kernel's tables were read again",
    MetricType::Counter,
    {}};
inline const MetricFamily kSyncRoutes{"vecflow_kernel_sync_route_syncs_total",
                                      "Route tables the kernel sync handed to route stages",
                                      MetricType::Counter,
                                      {}};
inline const MetricFamily kSyncNeighbours{
    "vecflow_kernel_sync_neighbour_updates_total",
    "Neighbour entries the kernel sync changed from the kernel's",
    MetricType::Counter,
    {}};
inline const MetricFamily kSyncRequests{
    "vecflow_kernel_sync_resolve_requests_total",
    "Next-hop resolutions the kernel sync asked the kernel for (NTF_USE)",
    MetricType::Counter,
    {}};
inline const MetricFamily kSyncRequestErrors{"vecflow_kernel_sync_request_errors_total",
                                             "Next-hop resolution requests the kernel refused",
                                             MetricType::Counter,
                                             {}};
constexpr auto kKernelSyncCounters = std::to_array<CounterField<KernelSyncStats, uint64_t>>({
    {"events", &kSyncEvents, &KernelSyncStats::events},
    {"overruns", &kSyncOverruns, &KernelSyncStats::overruns},
    {"route_syncs", &kSyncRoutes, &KernelSyncStats::route_syncs},
    {"neighbour_updates", &kSyncNeighbours, &KernelSyncStats::neighbour_updates},
    {"resolve_requests", &kSyncRequests, &KernelSyncStats::resolve_requests},
    {"request_errors", &kSyncRequestErrors, &KernelSyncStats::request_errors},
});
static_assert(covers_struct(kKernelSyncCounters));
// The shared neighbour table's (Pipeline owns it, with or without a neighbour stage); what the
// neighbour stages did is theirs (pipeline/neighbour/neighbour_commands.h).
inline const MetricFamily kNeighbours{"vecflow_neighbour_entries",
                                      "Next hops in the neighbour table, by state",
                                      MetricType::Gauge,
                                      {"state"}};

void register_stages(Registry& registry, Pipeline& pipeline) {
  (void)registry.add_command(Command{
      &kPipelineSpec,
      [&pipeline](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const auto only = a.uint("lcore");
        const Snapshot& s = ctx.snapshot;
        const RateWindow& rates = ctx.rates;
        const std::string only_label = only ? std::to_string(*only) : "";
        // The lcores that ran a stage, from the series the collector made.
        std::set<unsigned> lcores;
        if (const auto* fam = s.find(kStageCalls.name)) {
          for (const auto& [labels, value] : fam->series)
            if (value.count > 0) lcores.insert(static_cast<unsigned>(std::stoul(labels[2])));
        }
        if (only && !lcores.contains(static_cast<unsigned>(*only))) {
          std::string ran;
          for (unsigned l : lcores)
            ran += (ran.empty() ? "" : ", ") + std::to_string(l);
          return command_error(ErrorCode::BadArguments,
                               "lcore {} runs no stage (lcores that do: {})", *only,
                               ran.empty() ? "none yet" : ran);
        }
        auto per = [](uint64_t n, uint64_t d) {
          return d ? Json(static_cast<double>(n) / static_cast<double>(d)) : Json(nullptr);
        };
        auto groups = pipeline.groups();
        Json stages = Json::array();
        Json per_lcore = Json::array();
        for (size_t i = 0; i < pipeline.size(); ++i) {
          const Stage& st = pipeline.stage(i);
          size_t g = 0;
          while (g + 1 < groups.size() && groups[g + 1].first <= i)
            ++g;
          auto total = [&](const MetricFamily& f) {
            if (only) return s.count(f, {st.name(), st.type(), only_label});
            return static_cast<uint64_t>(s.sum(f, {{"stage", st.name()}, {"type", st.type()}}));
          };
          auto rate = [&](const MetricFamily& f) {
            if (only) return rates.rate(f, {st.name(), st.type(), only_label});
            return rates.rate_sum(f, {{"stage", st.name()}, {"type", st.type()}});
          };
          const uint64_t calls = total(kStageCalls);
          const uint64_t packets = total(kStagePackets);
          const uint64_t cycles = total(kStageCycles);
          auto pkt_rate = rate(kStagePackets);
          auto cyc_rate = rate(kStageCycles);
          if (!only && lcores.size() > 1) {
            for (unsigned l : lcores) {
              const std::string id = std::to_string(l);
              const uint64_t lc = s.count(kStageCalls, {st.name(), st.type(), id});
              const uint64_t lp = s.count(kStagePackets, {st.name(), st.type(), id});
              const uint64_t ly = s.count(kStageCycles, {st.name(), st.type(), id});
              per_lcore.push_back(
                  {{"lcore", l},
                   {"stage", st.name()},
                   {"calls", lc},
                   {"packets", lp},
                   {"packets_per_call", per(lp, lc)},
                   {"cycles_per_packet", per(ly, lp)},
                   {"pps", number_or_null(rates.rate(kStagePackets, {st.name(), st.type(), id}))}});
            }
          }
          stages.push_back({{"stage", st.name()},
                            {"type", st.type()},
                            {"group", g},
                            {"queue", groups.empty() ? "" : groups[g].name},
                            {"sched", groups.empty() ? "" : to_string(groups[g].sched)},
                            {"calls", calls},
                            {"packets", packets},
                            {"cycles", cycles},
                            {"packets_per_call", per(packets, calls)},
                            {"cycles_per_packet", per(cycles, packets)},
                            {"cycles_per_call", per(cycles, calls)},
                            {"pps", number_or_null(pkt_rate)},
                            // Over the last sampling interval: what the stage costs now.
                            {"recent_cycles_per_packet", pkt_rate && *pkt_rate > 0 && cyc_rate
                                                             ? Json(*cyc_rate / *pkt_rate)
                                                             : Json(nullptr)}});
        }
        Json out{{"interval_s", rates.interval_s()},
                 {"lcore", only ? Json(*only) : Json(nullptr)},
                 {"stages", std::move(stages)},
                 {"lcores", std::move(per_lcore)}};
        return out;
      },
      View{{table("", "/stages",
                  {{"STAGE", "stage"},
                   {"TYPE", "type"},
                   {"QUEUE", "queue"},
                   {"SCHED", "sched"},
                   {"CALLS", "calls", Unit::Count},
                   {"PACKETS", "packets", Unit::Count},
                   {"PKTS/CALL", "packets_per_call"},
                   {"CYCLES/PKT", "cycles_per_packet", Unit::Cycles},
                   {"NOW CYCLES/PKT", "recent_cycles_per_packet", Unit::Cycles},
                   {"RATE", "pps", Unit::Pps}}),
            table("per lcore", "/lcores",
                  {{"LCORE", "lcore"},
                   {"STAGE", "stage"},
                   {"CALLS", "calls", Unit::Count},
                   {"PACKETS", "packets", Unit::Count},
                   {"PKTS/CALL", "packets_per_call"},
                   {"CYCLES/PKT", "cycles_per_packet", Unit::Cycles},
                   {"RATE", "pps", Unit::Pps}},
                  "/calls")}}});
}

}  // namespace

std::vector<CounterTableInfo> pipeline_counter_tables() {
  return {describe("StageStats", kStageCounters), describe("MirrorCounters", kMirrorCounters),
          describe("KernelSyncStats", kKernelSyncCounters)};
}

void register_pipeline(Registry& registry, Pipeline& pipeline,
                       std::vector<unsigned> lcore_of_slot) {
  registry.add_collector("pipeline", [&pipeline, lcore_of_slot](Snapshot& s) {
    for (const auto& f : kStageCounters)
      s.declare(*f.family);
    // Per lcore that ran the stage: an lcore that never did has no series.
    for (size_t i = 0; i < pipeline.size(); ++i) {
      const Stage& st = pipeline.stage(i);
      for (unsigned slot = 0; slot < st.slots(); ++slot) {
        const StageStats c = st.stats(slot);
        if (c.calls == 0) continue;
        const std::string lcore =
            std::to_string(slot < lcore_of_slot.size() ? lcore_of_slot[slot] : slot);
        add_counters(s, kStageCounters, c, {st.name(), st.type(), lcore});
      }
    }
    for (const MirrorStage* st : pipeline.all<MirrorStage>())
      add_counters(s, kMirrorCounters, st->counters(), {st->name()});
    if (const KernelSync* sync = pipeline.kernel())
      add_counters(s, kKernelSyncCounters, sync->stats(), {});
    const NeighbourTable& table = pipeline.neighbours();
    size_t total = table.size();
    size_t resolved = std::min(table.resolved(), total);  // one may resolve between the reads
    s.set(kNeighbours, {"resolved"}, static_cast<double>(resolved));
    s.set(kNeighbours, {"unresolved"}, static_cast<double>(total - resolved));
  });

  register_stages(registry, pipeline);
  for (const StageModule* m : pipeline.registry().modules()) {
    if (m->add_commands != nullptr) m->add_commands(registry, pipeline);
  }
}

}  // namespace vecflow::control
