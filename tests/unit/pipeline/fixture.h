// Building pipelines in tests: two ports (wan = 0, lan = 1) without kernel interfaces, one
// lcore slot unless asked, and stage configurations made in code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/config.h"
#include "core/accounting.h"
#include "frames.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_worker.h"
#include "pipeline/route/route_stage.h"
#include "runtime/qsbr.h"
#include "support/eal_env.h"

namespace vecflow::test {

inline const MacAddress kWanMac{{0x02, 0xaa, 0, 0, 0, 0x01}};
inline const MacAddress kLanMac{{0x02, 0xbb, 0, 0, 0, 0x01}};
inline constexpr uint16_t kWan = 0;
inline constexpr uint16_t kLan = 1;

template <typename Params>
config::StageConfig stage(std::string type, Params params, bool fuse = false,
                          std::string name = "") {
  config::StageConfig s;
  s.type = type;
  s.name = name.empty() ? type : name;
  s.fuse = fuse;
  s.params = std::move(params);
  return s;
}

inline StaticRoute route(const std::string& pfx, const std::string& port,
                         const std::string& via = "") {
  StaticRoute r;
  r.prefix = prefix(pfx);
  NextHop nh;
  nh.port = port;
  if (!via.empty()) nh.via = address(via);
  r.nexthops.push_back(nh);
  return r;
}

inline StaticRoute route_action(const std::string& pfx, RouteAction a) {
  StaticRoute r;
  r.prefix = prefix(pfx);
  r.action = a;
  return r;
}

// A pipeline and what running it needs.
struct Harness {
  // `ports`: the pipeline's ports; none: wan and lan.
  explicit Harness(unsigned slots = 1, std::vector<PortInfo> ports = {})
      : outcomes(slots, ports.empty() ? 2 : ports.size()) {
    qsbr = std::move(*Qsbr::create(slots));
    ctx.ports = ports.empty() ? std::vector<PortInfo>{PortInfo{"wan", kWanMac, ""},
                                                      PortInfo{"lan", kLanMac, ""}}
                              : std::move(ports);
    ctx.lcore_slots = slots;
    ctx.qsbr = qsbr.get();
    ctx.capture_dir = ::testing::TempDir() + "vpi-capture";
  }

  ::testing::AssertionResult build(const std::vector<config::StageConfig>& stages,
                                   const StageRegistry& registry = StageRegistry::builtin()) {
    auto p = Pipeline::build(stages, ctx, registry);
    if (!p) return ::testing::AssertionFailure() << p.error().message;
    pipeline = std::move(*p);
    workers.clear();
    for (unsigned s = 0; s < ctx.lcore_slots; ++s)
      workers.push_back(std::make_unique<PipelineWorker>(*pipeline, outcomes, s));
    return ::testing::AssertionSuccess();
  }

  // Runs every group in turn on `pkts` (what sinks.next() gets goes on to the next group), as
  // a scheduler would, on lcore slot `slot`. Counts the packets as received at their port.
  void run(std::vector<rte_mbuf*> pkts, unsigned slot = 0) {
    for (rte_mbuf* m : pkts)
      outcomes.at(slot, PortId{m->port}).rx_packets.add();
    for (size_t g = 0; g < pipeline->groups().size() && !pkts.empty(); ++g) {
      sinks.later.clear();
      workers[slot]->run_vector(g, pkts, sinks);
      pkts = sinks.later;
    }
    sinks.later.clear();
  }
  rte_mbuf* run_one(rte_mbuf* m) {
    sinks.free_all();
    run({m});
    if (!sinks.tx.empty()) return sinks.tx.front();
    if (!sinks.to_kernel.empty()) return sinks.to_kernel.front();
    return nullptr;
  }
  // The pipeline's outcome so far, with tx and kernel counted from the sinks.
  AccountingSnapshot accounting() const {
    AccountingSnapshot s = outcomes.total_snapshot();
    s.tx += sinks.transmitted;
    s.to_kernel += sinks.handed_to_kernel;
    return s;
  }

  std::unique_ptr<Qsbr> qsbr;
  StageContext ctx;
  OutcomeTable outcomes;
  std::unique_ptr<Pipeline> pipeline;
  std::vector<std::unique_ptr<PipelineWorker>> workers;
  CollectSinks sinks;
};

}  // namespace vecflow::test
