// From the appliance file's slice to a SchedulerConfig: which queues the pipeline needs and
// what the scheduler section asks of them. The app (vecflowd) calls these; nothing here reads
// YAML.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "config/config.h"
#include "sched/scheduler.h"

namespace vecflow::sched {

struct StageQueues {
  std::vector<QueueConfig> queues;
  // stage_queue[i]: the queue stage i runs on. A fused stage shares the queue of the stage
  // before it (it runs to completion on the same worker, right after it).
  std::vector<uint8_t> stage_queue;
  // The atomic queue that restores order after an ordered stage (see worker.h), present
  // when some stage is ordered.
  std::optional<uint8_t> egress;
};

// One queue per stage that is not fused, in pipeline order, plus the egress queue.
StageQueues stage_queues(std::span<const config::StageConfig> stages);

// `producers`: one per rx adapter; `workers`: one per pipeline worker. queue_depth is the
// in-flight limit (events admitted and not yet finished, all stages together).
// `spare_mbufs`: packet buffers the ports do not keep posted for receive (fill rings, rx
// descriptors); the default worker backlog limit is a share of them.
SchedulerConfig scheduler_config(const config::SchedulerSection& section, const StageQueues& q,
                                 uint16_t producers, uint16_t workers, uint32_t spare_mbufs);

// Flow buckets per rx queue (scheduler.vector.buckets): as given, or for `auto` 8 per worker:
// a scheduler balancing N workers wants several units per worker to move, and each bucket
// more slows the filling of every vector (vectors of 64 within 50 us need 10 Mpps per queue
// at 8 buckets, 20 at 16).
uint16_t flow_buckets(const config::SchedulerSection& section, uint16_t workers);

}  // namespace vecflow::sched
