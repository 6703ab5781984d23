// Turns the steering section into the XDP program's classifier entries for one interface
// (bpf/include/vecflow/steer_abi.h describes the tuple-space layout).
//
// Control plane only: allocates freely, returns an operator-readable error when a rule set
// does not fit the program's bounds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "vecflow/steer_abi.h"

namespace vecflow::steer {

// Resolves a port name to the ifindex of its kernel interface (redirect targets).
using IfindexOf = std::function<Result<uint32_t>(std::string_view port)>;

struct CompiledRules {
  // Everything but the rules; rule_capacity is filled in by the installer.
  vf_steer_set set{};
  // Classifier entries; key.set_tuple holds the tuple index only (the installer adds the set).
  std::vector<std::pair<vf_rule_key, vf_rule_value>> entries;
  // Rule ids are indexes into steering.rules, so ids stay below this.
  uint32_t rule_count = 0;
  // Interfaces the rules redirect to (DEVMAP entries).
  std::vector<uint32_t> redirect_ifindexes;
  // vf_port_class contents: the class of every port (host order), source then destination.
  std::array<std::vector<uint16_t>, 2> port_class;
};

// The rx queues of the ingress interface that are read (by vecflow's sockets or DPDK's), and
// what happens to frames for user space on the others (appliance file: `other_queues`).
struct RxQueuePlan {
  uint64_t read = ~uint64_t{0};  // bit q: queue q is read; every queue unless told otherwise
  config::SteerActionKind other = config::SteerActionKind::Pass;  // Pass or Drop

  // The plan of an afxdp port: the queues its ranges name; other_queues, pass when unset
  // (queues the interface gains at run time).
  static RxQueuePlan of(const config::AfXdpPort& port);
};

// Compiles the rules that can match on `ingress_port` (rules naming another port are left
// out; their ids stay unused here). Ranks order rules by priority, then by position.
Result<CompiledRules> compile_rules(const config::SteeringSection& steering,
                                    std::string_view ingress_port, const IfindexOf& ifindex_of,
                                    const RxQueuePlan& queues = {});

}  // namespace vecflow::steer
