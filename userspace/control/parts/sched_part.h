// The event scheduler in the control plane: `sched` (backend, queues in and out, vectors formed
// by each rx adapter and why they closed, events per worker with its busy and idle share,
// flow migrations, backpressure; or the direct path when there is no scheduler), its counters
// in /metrics and its summary in `status`.
#pragma once

#include <string>
#include <vector>

#include "core/counter.h"

#include "api/counter_table.h"
#include "api/registry.h"
#include "sched/rx_adapter.h"
#include "sched/scheduler.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"

namespace vecflow::control {

// A direct path (datapath/direct_path.h: one worker running the pipeline on what its rx queues
// deliver, no scheduler), as `sched` shows it: its service name and counters.
struct DirectPathView {
  std::string name;
  const Counter* packets;  // received
  const Counter* runs;     // pipeline runs
  const sched::TxStats* tx;
};

// Everything is owned by the app and outlives the registry's use of it. `scheduler` is nullptr
// on the direct path (then there are no rx adapters or workers, and `direct` has the path).
// `tx_adapters[i]` is the sink of `workers[i]` (empty when the workers finish events
// elsewhere). A worker's, an rx adapter's and a direct path's busy and idle share come from the
// runtime's service counters (register_runtime) under the service's name; without them `sched`
// shows those shares as unknown.
void register_sched(Registry& registry, const sched::Scheduler* scheduler,
                    std::vector<const sched::RxAdapter*> rx_adapters,
                    std::vector<const sched::Worker*> workers,
                    std::vector<const sched::TxAdapter*> tx_adapters,
                    std::vector<DirectPathView> direct = {});

// The part's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> sched_counter_tables();

}  // namespace vecflow::control
