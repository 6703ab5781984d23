#include "pipeline/pipeline.h"

#include <algorithm>

#include "core/flow.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/neighbour_table.h"

namespace vecflow {

Pipeline::~Pipeline() = default;

Result<std::unique_ptr<Pipeline>> Pipeline::build(const std::vector<config::StageConfig>& stages,
                                                  StageContext ctx, const StageRegistry& registry) {
  if (ctx.qsbr == nullptr) return fail("the pipeline needs a grace-period domain (Qsbr)");
  if (ctx.lcore_slots == 0) return fail("the pipeline needs at least one lcore slot");
  if (stages.empty()) return fail("the pipeline has no stage");
  std::unique_ptr<Pipeline> p(new Pipeline());
  auto neighbours = NeighbourTable::create();
  if (!neighbours) return std::unexpected(neighbours.error());
  p->neighbours_ = std::move(*neighbours);
  p->neighbours_->set_offload(ctx.offload);
  ctx.neighbours = p->neighbours_.get();
  ctx.kernel = nullptr;

  bool interfaces = std::any_of(ctx.ports.begin(), ctx.ports.end(),
                                [](const PortInfo& port) { return !port.interface.empty(); });
  // Whether a stage follows the kernel: its routes, its addresses (ICMP sources) or its
  // neighbour resolution.
  auto needs_kernel = [&registry](const config::StageConfig& s) {
    const StageModule* m = registry.find(s.type);
    return m && m->needs_kernel && m->needs_kernel(s.params);
  };
  if (interfaces && std::any_of(stages.begin(), stages.end(), needs_kernel)) {
    auto k = KernelSync::create(ctx.ports, *p->neighbours_);
    if (!k) return fail("following the kernel: {}", k.error().message);
    p->kernel_ = std::move(*k);
    ctx.kernel = p->kernel_.get();
  }
  p->ctx_ = ctx;
  p->registry_ = &registry;

  for (size_t i = 0; i < stages.size(); ++i) {
    const config::StageConfig& sc = stages[i];
    auto stage = registry.create(sc, ctx);
    if (!stage) return std::unexpected(stage.error());
    if ((*stage)->holds_packets()) p->holders_.push_back(i);
    p->stages_.push_back(std::move(*stage));
    if (i == 0 || !sc.fuse) {
      p->groups_.push_back(PipelineGroup{i, 0, sc.sched, ""});
    }
    PipelineGroup& g = p->groups_.back();
    g.name += (g.count ? "+" : "") + sc.name;
    ++g.count;
  }
  // A stage that holds packets gives them back on the worker holding them, which runs the
  // stages after it there: they must all be fused to it (the last group).
  for (size_t h : p->holders_) {
    if (h < p->groups_.back().first) {
      return fail("stage '{}' holds packets, so the stages after it must be fused to it",
                  p->stages_[h]->name());
    }
  }
  return p;
}

bool Pipeline::reads_flow_hash() const noexcept {
  return std::any_of(stages_.begin(), stages_.end(),
                     [](const auto& s) { return s->reads_flow_hash(); });
}

const FlowHashRewrite* Pipeline::flow_hash_rewrite() const noexcept {
  const FlowHashRewrite* out = nullptr;
  for (const auto& s : stages_) {
    const FlowHashRewrite* r = s->flow_hash_rewrite();
    if (r != nullptr && (out == nullptr || r->translates())) out = r;
  }
  return out;
}

const Stage* Pipeline::offload_blocker() const noexcept {
  for (const auto& s : stages_) {
    if (!s->offloadable()) return s.get();
  }
  return nullptr;
}

bool Pipeline::decrements_ttl() const noexcept {
  return std::any_of(stages_.begin(), stages_.end(),
                     [](const auto& s) { return s->decrements_ttl(); });
}

void Pipeline::set_port(PortId id, const PortInfo& info) {
  const uint16_t i = to_index(id);
  if (i >= ctx_.ports.size()) return;
  ctx_.ports[i] = info;
  for (auto& s : stages_)
    s->set_port(id, info);
  if (kernel_) kernel_->set_port(id, info);
}

std::vector<std::shared_ptr<Service>> Pipeline::control_services() const {
  std::vector<std::shared_ptr<Service>> out;
  if (kernel_) out.push_back(kernel_);
  for (const auto& s : stages_) {
    if (auto svc = s->control_service()) out.push_back(std::move(svc));
  }
  return out;
}

std::vector<StageReport> Pipeline::report() const {
  std::vector<StageReport> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].count; ++i) {
      const Stage& s = *stages_[groups_[g].first + i];
      out.push_back(StageReport{s.name(), s.type(), g, s.stats()});
    }
  }
  return out;
}

}  // namespace vecflow
