// The forwarding pipeline: the ordered stages of the appliance file, built by their factories,
// grouped where the file fuses them. The pipeline owns the state its stages share (the
// neighbour table, the kernel synchroniser) and gives the control plane read access to every
// stage. Running it on vectors is PipelineWorker's job (pipeline/pipeline_worker.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/sched_types.h"
#include "pipeline/stage.h"
#include "pipeline/stage_registry.h"
#include "runtime/service.h"

namespace vecflow {

// Consecutive stages that run to completion on one worker: one scheduler queue.
struct PipelineGroup {
  size_t first = 0;                     // index of its first stage
  size_t count = 0;                     // stages in the group
  SchedType sched = SchedType::Atomic;  // the first stage's: the queue's type
  std::string name;                     // "route+neighbour+l2"
};

// One line of `vecflowctl runtime`: a stage's counters summed over lcores.
struct StageReport {
  std::string name;
  std::string type;
  size_t group = 0;
  StageStats stats;
};

class Pipeline {
 public:
  // Builds every stage in order. `ctx` gives ports, lcore slots, the Qsbr and the capture
  // directory; the pipeline adds its shared neighbour table and, when some port has a kernel
  // interface and a stage needs the kernel (route from_kernel or ICMP errors, any neighbour
  // stage), the kernel synchroniser. Build it inside the network namespace whose kernel it
  // should follow: its netlink sockets stay bound to the namespace they were made in.
  static Result<std::unique_ptr<Pipeline>> build(
      const std::vector<config::StageConfig>& stages, StageContext ctx,
      const StageRegistry& registry = StageRegistry::builtin());
  // Remove control_services() from their lcore before destroying the pipeline.
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  size_t size() const noexcept { return stages_.size(); }
  Stage& stage(size_t i) noexcept { return *stages_[i]; }
  const Stage& stage(size_t i) const noexcept { return *stages_[i]; }
  std::span<const PipelineGroup> groups() const noexcept { return groups_; }
  // Indexes of the stages that may hold packets (Stage::holds_packets), in pipeline order.
  std::span<const size_t> holders() const noexcept { return holders_; }
  // Whether some stage reads the flow hash (Stage::reads_flow_hash).
  bool reads_flow_hash() const noexcept;
  // The flow hash rewrite every port applies (Stage::flow_hash_rewrite): a translating one if a
  // stage has it (the configuration allows one NAT), else the first stage's; nullptr if none.
  const FlowHashRewrite* flow_hash_rewrite() const noexcept;
  // Flow offload (core/offload_feed.h): the feed the workers offer decided flows to (nullptr:
  // none), the first stage that keeps every flow in user space (Stage::offloadable; nullptr:
  // none does), and whether the path decrements the TTL.
  OffloadFeed* offload_feed() const noexcept { return ctx_.offload; }
  const Stage* offload_blocker() const noexcept;
  bool decrements_ttl() const noexcept;

  // The stage called `name` if it is a T (RouteStage, AclStage ...), else nullptr.
  template <typename T>
  T* find(std::string_view name) noexcept {
    for (auto& s : stages_) {
      if (s->name() == name) return dynamic_cast<T*>(s.get());
    }
    return nullptr;
  }
  // Every stage that is a T, in pipeline order.
  template <typename T>
  std::vector<T*> all() noexcept {
    std::vector<T*> out;
    for (auto& s : stages_) {
      if (auto* t = dynamic_cast<T*>(s.get())) out.push_back(t);
    }
    return out;
  }

  NeighbourTable& neighbours() noexcept { return *neighbours_; }
  const NeighbourTable& neighbours() const noexcept { return *neighbours_; }
  // The ports the stages know, indexed by PortId (names for tables that hold PortIds); an
  // entry with no name is an id no port has now.
  const std::vector<PortInfo>& ports() const noexcept { return ctx_.ports; }
  // A port added or removed by a reload (Stage::set_port): the stages, the kernel
  // synchroniser and ports() learn it. Control thread.
  void set_port(PortId id, const PortInfo& info);
  KernelSync* kernel() noexcept { return kernel_.get(); }
  // What the stages were built with, and the types they were built from.
  const StageContext& context() const noexcept { return ctx_; }
  const StageRegistry& registry() const noexcept { return *registry_; }

  // Services the control lcore must run for this pipeline: the kernel synchroniser (netlink
  // events, neighbour resolution requests, coalesced route rebuilds) and the writers of
  // mirror captures. Empty when the pipeline needs none.
  std::vector<std::shared_ptr<Service>> control_services() const;

  std::vector<StageReport> report() const;

 private:
  Pipeline() = default;
  StageContext ctx_;
  const StageRegistry* registry_ = nullptr;
  std::unique_ptr<NeighbourTable> neighbours_;
  std::shared_ptr<KernelSync> kernel_;
  std::vector<std::unique_ptr<Stage>> stages_;  // destroyed first: stages use the two above
  std::vector<PipelineGroup> groups_;
  std::vector<size_t> holders_;
};

}  // namespace vecflow
