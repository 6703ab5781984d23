// The `count` stage: per-flow or per-rule packet and byte counters, for `vecflowctl flows`.
//
//   by: flow   every lcore keeps its own table of the 5-tuples it saw (DPDK rte_hash, written
//              only by that lcore, so no lock and no shared line); the control plane reads the
//              counters while workers run and merges the lcores' tables. A table holds
//              max_flows flows; packets of flows beyond that are counted as untracked.
//   by: rule   counters per XDP steering rule (PacketMeta::steer_rule), per lcore; packets
//              no rule lifted (the steering default) have a counter of their own.
//
// Packets pass unchanged.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "config/config.h"
#include "core/dpdk_util.h"
#include "core/flow.h"
#include "pipeline/stage.h"

namespace vecflow {

enum class CountBy { Flow, Rule };

// The keys of a `stage: count` entry (configs/reference.yaml).
struct CountConfig {
  CountBy by = CountBy::Flow;
  uint32_t max_flows = 65536;
};

struct FlowCount {
  FlowKey key{};
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

struct RuleCount {
  uint32_t rule = 0;  // index in steering.rules, or kNoRule: packets no rule lifted
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

// How `vecflowctl flows` ranks flows.
enum class FlowOrder { Packets, Bytes };

class CountStage final : public PerPacketStage<CountStage> {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  static Result<std::unique_ptr<CountStage>> create(const config::StageConfig& cfg,
                                                    StageContext& ctx);
  ~CountStage() override;

  struct VectorState {
    unsigned slot;
  };
  VectorState begin(StageEnv& env) noexcept { return VectorState{env.slot()}; }
  void process_packet(rte_mbuf* m, VectorState& vs, StageEnv& env) noexcept;

  CountBy by() const noexcept { return by_; }
  // The `n` flows with the most packets (or bytes), merged over lcores (by: flow). Ties go to
  // the other measure, then to the key, so equal tables give equal answers.
  std::vector<FlowCount> top_flows(size_t n, FlowOrder order = FlowOrder::Packets) const;
  // Flows tracked, summed over lcores (a flow seen on two lcores counts twice).
  size_t tracked() const noexcept;
  // Packets of flows the tables had no room for, and packets that are not IP.
  uint64_t untracked() const noexcept;
  // Rules with packets, in rule order (by: rule).
  std::vector<RuleCount> rules() const;

 private:
  struct FlowSlot {
    FlowKey key{};
    Counter packets;
    Counter bytes;
    std::atomic<bool> valid{false};  // key written before this is set (release)
  };
  struct alignas(64) FlowTable {
    DpdkPtr<rte_hash> hash;
    std::unique_ptr<FlowSlot[]> slots;  // by rte_hash key position
    uint32_t slots_size = 0;
    uint32_t capacity = 0;  // max_flows
    std::atomic<uint32_t> used{0};
    Counter untracked;
  };
  struct RuleSlot {
    Counter packets;
    Counter bytes;
  };

  CountStage(const config::StageConfig& cfg, StageContext& ctx);

  CountBy by_;
  std::vector<std::unique_ptr<FlowTable>> flows_;   // by lcore slot (by: flow)
  std::vector<std::unique_ptr<RuleSlot[]>> rules_;  // by lcore slot (by: rule)
  uint32_t rule_slots_ = 0;                         // steering rules + 1: the last counts kNoRule
};

struct StageModule;
// The count stage type: its configuration and factory.
StageModule count_stage_module();

}  // namespace vecflow
