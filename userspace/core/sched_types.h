// The scheduler settings that the appliance file names and the parts below the scheduler act
// on: the configuration reads them (config/config.h), the scheduler (sched/) and the ports
// (io/) use the same values, and to_string gives the file's and the control protocol's
// spelling of each.
#pragma once

#include <cstdint>
#include <string_view>

namespace vecflow {

// How a scheduler queue (a pipeline stage) hands out the events of a flow. The values are
// DPDK's RTE_SCHED_TYPE_* (sched/event.h checks them), so a queue's type goes into an
// rte_event's sched_type field as it is.
enum class SchedType : uint8_t {
  Atomic = 1,    // a flow is on at most one worker at a time, in order
  Ordered = 0,   // order restored at the next enqueue
  Parallel = 2,  // no guarantee
};

// What moves the events: vecflow's own scheduler (sched/builtin_backend.h) or a DPDK eventdev
// (sched/eventdev.h).
enum class SchedBackend : uint8_t { Builtin, Eventdev };

// Where a port takes a frame's flow id from, the id the scheduler keeps a flow's events
// together by (scheduler.flow_id). Whatever the choice, a frame that carries the XDP steering
// program's metadata (AF_XDP ports, DPDK's net_af_xdp) takes the metadata's hash; the choice
// decides for the others.
enum class FlowIdSource : uint8_t {
  Auto,      // the NIC's RSS hash where the PMD reports one, else the software hash (the same
             // vf_flow_hash the XDP program computes)
  Xdp,       // the XDP metadata's hash; a frame without metadata is treated as for Auto
  Rss,       // the NIC's RSS hash, software where the PMD reports none
  Software,  // always vf_flow_hash: one id per flow whichever port sees it
};

std::string_view to_string(SchedType t) noexcept;
std::string_view to_string(SchedBackend b) noexcept;
std::string_view to_string(FlowIdSource f) noexcept;

}  // namespace vecflow
