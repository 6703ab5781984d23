// A checked pipeline over CPU events: a producer stamps per-flow sequence numbers, workers
// check that no flow of an atomic queue is ever on two workers at once and that atomic stages
// see each flow in order, and the egress checks per-flow order end to end. Used by the tests
// of every backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/service.h"
#include "sched/scheduler.h"
#include "sched/worker.h"
#include "sched_support.h"

namespace vecflow::test {

struct Scenario {
  std::vector<SchedType> stages;
  uint32_t flows = 1024;
  uint64_t events = 100'000;
  uint16_t workers = 2;
  // Producer ports, polled by one lcore; each sends its own share of the flows (flow % producers),
  // so every flow's order is one producer's order.
  uint16_t producers = 1;
  uint32_t inflight = 4096;
  bool retry = true;              // producer resends refused events; else counts them dropped
  uint64_t rate = 0;              // producer events per second; 0: as fast as accepted
  std::vector<uint32_t> cost_ns;  // per worker: time spent on each event
  const sched::BuiltinTuning* tuning = nullptr;
  uint16_t burst_min = 32;  // producer burst sizes, uniformly in [burst_min, burst_max]
  uint16_t burst_max = 32;
};

struct Outcome {
  bool completed = false;  // every event delivered or counted dropped in time
  uint64_t delivered = 0;
  uint64_t refused_at_producer = 0;
  uint64_t dropped_at_workers = 0;
  uint64_t atomic_violations = 0;   // a flow of an atomic queue on two workers at once
  uint64_t stage_order_errors = 0;  // an atomic stage saw a flow out of order
  uint64_t egress_order_errors = 0;
  uint64_t inflight_after = 0;
  std::vector<uint64_t> per_worker_events;
  sched::SchedulerStats stats;
};

// Runs the scenario on `kind` with one producer lcore and one lcore per worker.
Outcome run_scenario(BackendKind kind, const Scenario& s);

}  // namespace vecflow::test
