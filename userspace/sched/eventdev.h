// The eventdev backend: any DPDK event device behind the Scheduler interface.
//
// The device is the one named by the configuration: a software vdev (event_dsw<N>,
// event_sw<N>, created here with the configured devargs when not yet probed) or a hardware
// eventdev probed by EAL (DLB2, OCTEON SSO), found by name. Queues, ports and links are set
// up from the same SchedulerConfig as the builtin backend: producers are unlinked ports,
// every worker port is linked to every queue, implicit release stays on (a worker's next
// dequeue releases its previous burst, as with the builtin backend).
//
// What a device cannot do is refused here with the reason (and, for the software devices,
// earlier by `vecflowd --check`): ordered queues on event_dsw, more queues, ports or in-flight
// events than the device offers. Devices without RTE_EVENT_DEV_CAP_MAINTENANCE_FREE mark
// their ports needs_maintenance(); devices that schedule in a DPDK service (event_sw) return
// it from Scheduler::service() as a vecflow Service for the application to place on a lcore.
#pragma once

#include <memory>

#include "core/error.h"
#include "sched/scheduler.h"

namespace vecflow::sched {

Result<std::unique_ptr<Scheduler>> create_eventdev_scheduler(const SchedulerConfig& config);

}  // namespace vecflow::sched
