// The event scheduler in the control plane: `sched` (backend, queues in and out, vectors formed
// by each rx adapter and why they closed, events per worker with its busy and idle share,
// flow migrations, backpressure), its counters in /metrics and its summary in `status`.
#pragma once

#include <vector>

#include "control/registry.h"
#include "sched/rx_adapter.h"
#include "sched/scheduler.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"

namespace vecflow::control {

// Everything is owned by the app and outlives the registry's use of it. `tx_adapters[i]` is
// the sink of `workers[i]` (empty when the workers finish events elsewhere). A worker's and an
// rx adapter's busy and idle share come from the runtime's service counters (register_runtime)
// under the service's name; without them `sched` shows those shares as unknown.
void register_sched(Registry& registry, const sched::Scheduler& scheduler,
                    std::vector<const sched::RxAdapter*> rx_adapters,
                    std::vector<const sched::Worker*> workers,
                    std::vector<const sched::TxAdapter*> tx_adapters);

}  // namespace vecflow::control
