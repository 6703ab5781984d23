#include "datapath/datapath.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/log.h"
#include "core/packet.h"
#include "io/afxdp/afxdp_port.h"
#include "io/port_factory.h"
#include "io/vlan/vlan_port.h"
#include "pipeline/stage_registry.h"
#include "sched/from_config.h"

namespace vecflow {
namespace {

// Vectors one lcore's mempool cache holds. Small: vectors are few (a handful per open flow)
// and a large cache strands them on lcores that do not use them.
constexpr uint32_t kVectorCache = 32;

std::vector<unsigned> worker_lcores(const config::ApplianceConfig& cfg) {
  return cfg.scheduler.workers.empty() ? cfg.cpu.workers : cfg.scheduler.workers;
}

// Packet buffers the pool has beyond what the ports keep posted for receive (AF_XDP fill
// rings, DPDK rx descriptors) and what stages may hold (neighbour stages while next hops
// resolve): what packets in flight can use.
uint32_t spare_mbufs(const config::ApplianceConfig& cfg) {
  uint64_t posted = 0;
  for (const auto& s : cfg.pipeline) {
    const StageModule* m = StageRegistry::builtin().find(s.type);
    if (m != nullptr && m->held_packets != nullptr)
      posted += m->held_packets(s.params) * worker_lcores(cfg).size();
  }
  for (const auto& p : cfg.ports) {
    if (const auto* a = std::get_if<config::AfXdpPort>(&p.kind)) {
      for (const auto& r : a->queues)
        posted += uint64_t{r.count} * a->ring_size;
    } else if (const auto* d = std::get_if<config::DpdkPort>(&p.kind)) {
      posted += uint64_t{d->queues} * d->rx_descriptors;
    }
  }
  return cfg.dpdk.mbufs > posted ? static_cast<uint32_t>(cfg.dpdk.mbufs - posted) : 0;
}

// 0 for a port on a link, 1 for a VLAN port, 2 for a QinQ port (the validation allows no more).
size_t vlan_depth(const config::ApplianceConfig& cfg, const config::PortConfig& port) {
  return vlan_tags(cfg, port).count();
}

}  // namespace

Result<std::unique_ptr<DataPath>> DataPath::create(const config::ApplianceConfig& cfg,
                                                   Runtime& runtime, steer::XdpSteering& steering,
                                                   OutcomeTable& outcomes) {
  auto dp = std::unique_ptr<DataPath>(new DataPath());
  dp->runtime_ = &runtime;
  if (cfg.ports.empty()) return dp;  // nothing to forward: the control plane alone
  if (cfg.pipeline.empty())
    return fail(
        "pipeline: the file declares ports but no pipeline stage; packets lifted to user space "
        "need at least a route stage to go anywhere");
  // Every part reads and writes PacketMeta in the mbuf's dynamic field area: its offset must
  // be registered before the first packet is received.
  if (auto r = register_packet_meta(); !r) return fail("packet metadata: {}", r.error().message);
  if (auto r = dp->create_ports(cfg, steering); !r) return std::unexpected(r.error());
  if (auto r = dp->build_pipeline(cfg, runtime); !r) return std::unexpected(r.error());
  if (auto r = dp->build_scheduler(cfg, runtime, outcomes); !r) return std::unexpected(r.error());
  return dp;
}

// Start-up order of io/port_factory.h: create every port (DPDK-owned AF_XDP queues attach the
// steering object here), let steering adopt what DPDK attached, give each AF_XDP port its
// XSKMAP, then start them.
Result<void> DataPath::create_ports(const config::ApplianceConfig& cfg,
                                    steer::XdpSteering& steering) {
  mtus_ = std::make_unique<PortMtuTable>(kMaxPorts);
  auto pool = PacketPool::create(pool_options(cfg));
  if (!pool) return fail("packet pool: {}", pool.error().message);
  pool_ = std::move(*pool);

  env_ = port_environment(cfg);
  env_.pool = pool_.get();
  env_.steering_object = steer::XdpSteering::bpf_object_path();
  for (size_t i = 0; i < cfg.ports.size(); ++i)
    ids_[cfg.ports[i].name] = static_cast<uint16_t>(i);
  // VLAN sub-interfaces after the ports they are VLANs of, QinQ ports after their service
  // VLANs' (a port's id is its index in the file, wherever it is declared).
  ports_.resize(cfg.ports.size());
  for (size_t depth : {0, 1, 2}) {
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
      if (vlan_depth(cfg, cfg.ports[i]) != depth) continue;
      const auto* v = std::get_if<config::VlanPort>(&cfg.ports[i].kind);
      const auto parent = v ? cfg.port_index(v->parent) : std::nullopt;
      auto port = create_port(cfg.ports[i], PortId{static_cast<uint16_t>(i)}, env_,
                              parent ? ports_[*parent].get() : nullptr,
                              parent ? &cfg.ports[*parent] : nullptr);
      if (!port) return fail("port '{}': {}", cfg.ports[i].name, port.error().message);
      ports_[i] = std::move(*port);
      start_order_.push_back(ports_[i].get());
    }
  }
  // One demultiplexer per link, for its VLANs and their QinQ customer VLANs.
  for (size_t i = 0; i < cfg.ports.size(); ++i) {
    if (!cfg.ports[i].is_vlan()) continue;
    claims_[static_cast<uint16_t>(i)] = vlan_claim(cfg, cfg.ports[i]);
    vlan_links_[static_cast<uint16_t>(i)] = claims_[static_cast<uint16_t>(i)].link;
    claim(PortId{static_cast<uint16_t>(i)}, true);
  }
  keep_vlan_tags(cfg);

  const auto setup = steer::steer_setup(cfg);
  for (const auto& sp : setup.ports) {
    if (!sp.attach) {
      if (auto r = steering.adopt(sp.name); !r)
        return fail("port '{}': steering: {}", sp.name, r.error().message);
    }
  }
  for (auto& port : ports_) {
    // A VLAN sub-interface's frames reach the kernel through an exception path of their own,
    // so that the kernel sees them on an interface of that VLAN, not of the trunk.
    if (dynamic_cast<VlanPort*>(port.get()) != nullptr) {
      if (auto r = port->enable_kernel_path(); !r)
        return fail("port '{}': exception path: {}", port->name(), r.error().message);
      continue;
    }
    auto* xsk = dynamic_cast<AfXdpPort*>(port.get());
    if (!xsk) continue;
    if (auto r = xsk->set_xsks_map(steering.xsks_map_fd(port->name())); !r)
      return fail("port '{}': {}", port->name(), r.error().message);
    // Frames XDP lifted to user space never reached the kernel: what the pipeline hands back
    // to it (addressed to the box, unresolved next hops) goes in through an exception path.
    // DPDK ports get none: a PMD on a kernel interface (af_packet) leaves the kernel its own
    // copy, and a device without a kernel interface has no kernel to go to.
    if (auto r = port->enable_kernel_path(); !r)
      return fail("port '{}': exception path: {}", port->name(), r.error().message);
  }
  // Parents first: a VLAN device is made on its parent's.
  for (Port* port : start_order_) {
    if (auto r = port->start(); !r) return fail("port '{}': {}", port->name(), r.error().message);
  }
  ports_started_ = true;
  refresh_mtus();
  return {};
}

// A NIC that strips VLAN tags on receive (rx-vlan-offload) hides them from XDP: the steering
// program and the demultiplexer would see a tagged frame untagged, the trunk's own. On the
// links that carry VLAN ports, or whose steering rules match tags, the offloads are off while
// vecflowd runs. (The other way, reading the tag from the driver's rx metadata with
// bpf_xdp_metadata_rx_vlan_tag, needs a device-bound program, which libxdp's dispatcher is not.)
void DataPath::keep_vlan_tags(const config::ApplianceConfig& cfg) {
  bool steer_by_tag = false;
  for (const auto& r : cfg.steering.rules)
    steer_by_tag |= r.match.vlan.has_value() || r.match.inner_vlan.has_value();
  for (size_t i = 0; i < cfg.ports.size(); ++i) {
    if (steer_by_tag || vlan_demux_.contains(static_cast<uint16_t>(i)))
      keep_vlan_tags(cfg.ports[i]);
  }
}

void DataPath::keep_vlan_tags(const config::PortConfig& link) {
  const auto* a = std::get_if<config::AfXdpPort>(&link.kind);
  if (a == nullptr) return;
  auto off =
      InterfaceFeaturesOff::apply(a->interface, {"rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"});
  if (!off) {
    log::get("io")->warn(
        "port {}: {}: VLAN tags its NIC strips are lost to its VLAN ports and "
        "steering",
        link.name, off.error().message);
    return;
  }
  if (!off->changed().empty()) {
    log::get("io")->info("port {}: {} off on {} while vecflowd runs (XDP must see the tags)",
                         link.name, fmt::join(off->changed(), ", "), a->interface);
    vlan_offloads_off_.push_back(std::move(*off));
  }
}

DataPath::VlanClaim DataPath::vlan_claim(const config::ApplianceConfig& cfg,
                                         const config::PortConfig& port) const {
  const auto& v = std::get<config::VlanPort>(port.kind);
  const auto& parent = *cfg.find_port(v.parent);
  VlanClaim c;
  c.link = ids_.at(cfg.link_of(port)->name);
  if (const auto* service = std::get_if<config::VlanPort>(&parent.kind)) {
    c.tpid = vlan_tpid(*service);
    c.vid = service->vlan;
    c.inner = v.vlan;
  } else {
    c.tpid = vlan_tpid(v);
    c.vid = v.vlan;
  }
  return c;
}

void DataPath::claim(PortId id, bool on) {
  const VlanClaim& c = claims_.at(to_index(id));
  auto& demux = vlan_demux_[c.link];
  const bool made = demux == nullptr;
  if (made) demux = std::make_unique<VlanDemux>();
  if (c.inner && on) demux->claim_inner(c.tpid, c.vid, *c.inner, to_index(id));
  if (c.inner && !on) demux->release_inner(c.tpid, c.vid, *c.inner);
  if (!c.inner && on) demux->claim(c.tpid, c.vid, to_index(id));
  if (!c.inner && !on) demux->release(c.tpid, c.vid);
  // The link's bursts see the demultiplexer once it holds the claim.
  if (made) ports_[c.link]->set_vlans(demux.get());
}

Result<void> DataPath::build_pipeline(const config::ApplianceConfig& cfg, Runtime& runtime) {
  StageContext ctx;
  for (size_t i = 0; i < cfg.ports.size(); ++i) {
    const auto& p = cfg.ports[i];
    std::string itf;
    if (auto* a = std::get_if<config::AfXdpPort>(&p.kind)) itf = a->interface;
    if (auto* d = std::get_if<config::DpdkPort>(&p.kind)) itf = d->interface;
    if (auto* v = std::get_if<config::VlanPort>(&p.kind)) itf = v->interface;
    ctx.ports.push_back(PortInfo{p.name, ports_[i]->mac(), itf, vlan_tags(cfg, p)});
  }
  ctx.ports.resize(kMaxPorts);  // the ids a reload may give (add_vlan_port)
  ctx.mtus = mtus_.get();
  ctx.lcore_slots = static_cast<unsigned>(runtime.slots());
  ctx.qsbr = &runtime.qsbr();
  ctx.capture_dir = cfg.control.capture_dir;
  ctx.icmp = cfg.icmp;
  ctx.steer_rules = static_cast<uint32_t>(cfg.steering.rules.size());
  ctx.vrfs = cfg.vrfs;
  // Made whether or not offload is on, so that a reload can turn it on.
  auto feed = OffloadFeed::create(ctx.lcore_slots, kMaxPorts);
  if (!feed) return std::unexpected(feed.error());
  offload_ = std::move(*feed);
  ctx.offload = offload_.get();
  auto pipeline = Pipeline::build(cfg.pipeline, std::move(ctx));
  if (!pipeline) return fail("pipeline: {}", pipeline.error().message);
  pipeline_ = std::move(*pipeline);
  // A NAT's replies, and the later fragments of a datagram, must reach the flow bucket of
  // their connection: every port hashes them through the stages' rewrite.
  hash_rewrite_ = pipeline_->flow_hash_rewrite();
  control_services_ = pipeline_->control_services();
  for (auto& s : control_services_)
    runtime.control().add_service(s);
  return {};
}

Result<void> DataPath::build_scheduler(const config::ApplianceConfig& cfg, Runtime& runtime,
                                       OutcomeTable& outcomes) {
  const auto workers = worker_lcores(cfg);
  if (workers.empty()) return fail("scheduler: no worker lcore (cpu.workers is empty)");
  for (const auto& port : ports_) {
    if (port->tx_queue_count() < workers.size())
      return fail(
          "port '{}' has {} tx queue(s) and there are {} pipeline workers: each worker needs a "
          "tx queue of its own on every port (raise the port's queues or lower the workers)",
          port->name(), port->tx_queue_count(), workers.size());
  }

  // Which lcore polls which rx queue.
  std::map<unsigned, std::vector<std::pair<Port*, uint16_t>>> polled;
  size_t next_worker = 0;
  for (size_t i = 0; i < ports_.size(); ++i) {
    for (uint16_t q = 0; q < ports_[i]->rx_queue_count(); ++q) {
      unsigned lcore =
          cfg.ports[i].lcore ? *cfg.ports[i].lcore : workers[next_worker++ % workers.size()];
      polled[lcore].emplace_back(ports_[i].get(), q);
    }
  }

  uint16_t max_queues = 1;
  for (const auto& port : ports_)
    max_queues = std::max({max_queues, port->rx_queue_count(), port->tx_queue_count()});
  hooks_ = std::make_unique<HookTable>(runtime.qsbr(), kMaxPorts, max_queues);

  // One worker that polls every rx queue: nothing to schedule. Then the flow hash is computed
  // only where a stage reads it; the scheduler's flow ids always do.
  const bool direct = cfg.scheduler.path == config::SchedPath::Auto && workers.size() == 1 &&
                      polled.size() == 1 && polled.begin()->first == workers.front();
  for (auto& port : ports_)
    port->set_flow_hash(!direct || pipeline_->reads_flow_hash(), hash_rewrite_);
  if (direct) return build_direct(workers.front(), polled.begin()->second, runtime, outcomes);

  const auto queues = sched::stage_queues(cfg.pipeline);
  auto sc = sched::scheduler_config(cfg.scheduler, queues, static_cast<uint16_t>(polled.size()),
                                    static_cast<uint16_t>(workers.size()), spare_mbufs(cfg));
  auto sched = sched::create_scheduler(sc);
  if (!sched) return fail("scheduler: {}", sched.error().message);
  sched_ = std::move(*sched);

  const uint16_t vsize = cfg.scheduler.vector_size;
  const uint16_t buckets =
      sched::flow_buckets(cfg.scheduler, static_cast<uint16_t>(workers.size()));
  if (vsize > 1) {
    uint32_t rx_queues = 0;
    for (const auto& [lcore, list] : polled)
      rx_queues += static_cast<uint32_t>(list.size());
    const uint32_t vectors = uint32_t{buckets} * rx_queues + cfg.scheduler.queue_depth +
                             kVectorCache * static_cast<uint32_t>(runtime.slots());
    auto pool = sched::VectorPool::create("vecflow_vectors", vectors, vsize, kVectorCache);
    if (!pool) return fail("vector pool: {}", pool.error().message);
    vectors_ = std::move(*pool);
  }

  const uint8_t first_queue = queues.stage_queue.at(0);
  size_t producer = 0;
  for (const auto& [lcore, list] : polled) {
    Lcore* lc = runtime.lcore(lcore);
    if (!lc) return fail("lcore {} polls a port but is not an lcore of the appliance", lcore);
    sched::RxAdapterConfig rc;
    rc.vector_size = vsize;
    rc.vector_timeout_us = cfg.scheduler.vector_timeout_us;
    rc.queue = first_queue;
    rc.sched_type = sched_->queue_type(first_queue);
    rc.vector_pool = vectors_.get();
    rc.hooks = hooks_.get();
    rc.flow_buckets = buckets;
    auto rx = std::make_shared<sched::RxAdapter>(
        fmt::format("rx{}", lcore), sched_->producer(static_cast<uint16_t>(producer++)), rc,
        outcomes.row(runtime.slot(lcore)));
    for (const auto& [port, q] : list) {
      if (auto r = rx->add_queue(*port, q); !r)
        return fail("port '{}' queue {}: {}", port->name(), q, r.error().message);
    }
    rx_.push_back(rx);
    rx_lcores_.push_back(lcore);
  }

  std::vector<uint8_t> group_queue;
  for (const auto& g : pipeline_->groups())
    group_queue.push_back(queues.stage_queue.at(g.first));

  for (size_t w = 0; w < workers.size(); ++w) {
    const unsigned lcore = workers[w];
    if (!runtime.lcore(lcore)) return fail("scheduler worker lcore {} is not an lcore", lcore);
    const unsigned slot = static_cast<unsigned>(runtime.slot(lcore));
    add_tx_adapter(static_cast<uint16_t>(w), slot, outcomes);
    handlers_.push_back(
        std::make_unique<PipelineHandler>(*pipeline_, outcomes, slot, group_queue, *tx_.back()));
    workers_.push_back(std::make_shared<sched::Worker>(
        fmt::format("worker{}", lcore), *sched_, sched_->worker(static_cast<uint16_t>(w)),
        *handlers_.back(), *tx_.back(), queues.egress));
    worker_lcores_.push_back(lcore);
  }

  // Services onto their lcores: receive first in each round, then the pipeline.
  for (size_t i = 0; i < rx_.size(); ++i)
    runtime.lcore(rx_lcores_[i])->add_service(rx_[i]);
  for (size_t i = 0; i < workers_.size(); ++i)
    runtime.lcore(worker_lcores_[i])->add_service(workers_[i]);
  // A backend that needs a scheduling service (event_sw) gets the first worker lcore: it
  // must run as often as the workers dequeue.
  if ((sched_service_ = sched_->service())) {
    sched_service_lcore_ = workers.front();
    runtime.lcore(sched_service_lcore_)->add_service(sched_service_);
  }
  log::get("app")->info(
      "data path: {} port(s), {} rx adapter(s), {} worker(s), scheduler {}, {} queue(s), "
      "vectors of {} over {} flow buckets per rx queue",
      ports_.size(), rx_.size(), workers_.size(), sched_->backend(), sched_->queue_count(), vsize,
      buckets);
  return {};
}

void DataPath::refresh_mtus() {
  for (const auto& p : ports_) {
    if (!p) continue;
    const uint32_t mtu = p->device_mtu();
    if (mtus_->set(to_index(p->id()), mtu))
      log::get("app")->info("port {}: MTU {}", p->name(), mtu ? std::to_string(mtu) : "unknown");
  }
}

void DataPath::add_tx_adapter(uint16_t queue, unsigned slot, OutcomeTable& outcomes) {
  std::vector<sched::TxTarget> tx_targets, kernel_targets;
  for (auto& port : ports_) {
    const sched::TxTarget t{port.get(), queue};
    tx_targets.push_back(t);
    kernel_targets.push_back(port->kernel_path() ? t : sched::TxTarget{});
  }
  tx_queues_.push_back(queue);
  tx_.push_back(std::make_unique<sched::TxAdapter>(std::move(tx_targets), std::move(kernel_targets),
                                                   outcomes.row(slot), hooks_.get(), mtus_.get(),
                                                   offload_.get()));
}

Result<void> DataPath::build_direct(unsigned lcore,
                                    const std::vector<std::pair<Port*, uint16_t>>& queues,
                                    Runtime& runtime, OutcomeTable& outcomes) {
  Lcore* lc = runtime.lcore(lcore);
  if (!lc) return fail("worker lcore {} is not an lcore of the appliance", lcore);
  const auto slot = static_cast<unsigned>(runtime.slot(lcore));
  add_tx_adapter(0, slot, outcomes);
  direct_ = std::make_shared<DirectPath>(fmt::format("direct{}", lcore), *pipeline_, outcomes, slot,
                                         *tx_.back(), hooks_.get());
  for (const auto& [port, q] : queues)
    direct_->add_queue(*port, q);
  direct_lcore_ = lcore;
  lc->add_service(direct_);
  log::get("app")->info(
      "data path: {} port(s), direct on lcore {}: its one worker polls every rx queue and runs "
      "the pipeline on what it receives, without the scheduler (scheduler.path: scheduled "
      "puts it back)",
      ports_.size(), lcore);
  return {};
}

std::optional<PortId> DataPath::port_id(std::string_view name) const {
  const auto it = ids_.find(name);
  if (it == ids_.end()) return std::nullopt;
  return PortId{it->second};
}

std::vector<std::string> DataPath::port_names() const {
  std::vector<std::string> out(ids_.size());
  for (const auto& [name, id] : ids_)
    out[id] = name;
  return out;
}

std::map<std::string, std::vector<std::string>> DataPath::vlans_by_link() const {
  const auto names = port_names();
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [port, link] : vlan_links_)
    out[names[link]].push_back(names[port]);
  return out;
}

Result<PortId> DataPath::add_vlan_port(const config::ApplianceConfig& next,
                                       const config::PortConfig& pc) {
  const auto& v = std::get<config::VlanPort>(pc.kind);
  const auto parent = port_id(v.parent);
  if (!parent || to_index(*parent) >= ports_.size() || !ports_[to_index(*parent)])
    return fail("its parent '{}' does not run", v.parent);
  auto known = port_id(pc.name);
  if (known && to_index(*known) < ports_.size() && ports_[to_index(*known)])
    return fail("a port '{}' runs already", pc.name);
  if (!known && ids_.size() >= kMaxPorts)
    return fail(
        "{} ports have had an id since vecflowd started, the most it gives; restart "
        "vecflowd to give ids again",
        kMaxPorts);
  const PortId id = known ? *known : PortId{static_cast<uint16_t>(ids_.size())};
  Port& parent_port = *ports_[to_index(*parent)];
  auto port = create_port(pc, id, env_, &parent_port, next.find_port(v.parent));
  if (!port) return std::unexpected(port.error());
  if (auto r = (*port)->enable_kernel_path(); !r)
    return fail("exception path: {}", r.error().message);
  if (auto r = (*port)->start(); !r) return std::unexpected(r.error());
  const uint16_t i = to_index(id);
  ids_[pc.name] = i;
  if (ports_.size() <= i) ports_.resize(i + 1u);
  ports_[i] = std::move(*port);
  Port* added = ports_[i].get();
  start_order_.push_back(added);
  claims_[i] = vlan_claim(next, pc);
  vlan_links_[i] = claims_[i].link;
  if (!vlan_demux_.contains(claims_[i].link)) keep_vlan_tags(*next.link_of(pc));
  refresh_mtus();
  for (size_t t = 0; t < tx_.size(); ++t) {
    const sched::TxTarget target{added, tx_queues_[t]};
    tx_[t]->attach(id, target, added->kernel_path() ? target : sched::TxTarget{});
  }
  pipeline_->set_port(id, PortInfo{pc.name, added->mac(), v.interface, vlan_tags(next, pc)});
  log::get("app")->info("port {}: added (id {}), VLAN {} of {}", pc.name, i, v.vlan, v.parent);
  return id;
}

void DataPath::publish_vlan_port(std::string_view name) {
  if (const auto id = port_id(name)) claim(*id, true);
}

void DataPath::detach_vlan_port(std::string_view name) {
  if (const auto id = port_id(name)) claim(*id, false);
}

void DataPath::reattach_vlan_port(std::string_view name) {
  publish_vlan_port(name);
}

void DataPath::retire_vlan_port(std::string_view name) {
  const auto id = port_id(name);
  if (!id || to_index(*id) >= ports_.size() || !ports_[to_index(*id)]) return;
  const uint16_t i = to_index(*id);
  for (auto& tx : tx_)
    tx->detach(*id);
  // No worker is still in a round that saw the port before it goes.
  runtime_->qsbr().synchronize();
  pipeline_->set_port(*id, PortInfo{});
  Port* port = ports_[i].get();
  port->stop();
  std::erase(start_order_, port);
  claims_.erase(i);
  ports_[i].reset();
  log::get("app")->info("port {}: removed (id {} is kept for it)", name, i);
}

uint64_t DataPath::drain(unsigned timeout_ms) noexcept {
  if (direct_) direct_->park();
  if (!sched_) return 0;
  // No lcore runs any more: the adapters and workers are run here, one thread, one at a time.
  for (auto& rx : rx_)
    rx->flush();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (sched_->inflight() > 0 && std::chrono::steady_clock::now() < deadline) {
    // A backend that buffers in its ports (event_dsw) sends what producers enqueued only
    // when asked to, and no rx adapter polls any more.
    for (uint16_t p = 0; p < sched_->producer_count(); ++p)
      sched_->producer(p).maintain();
    if (sched_service_) sched_service_->poll();
    for (auto& w : workers_)
      w->poll();
  }
  for (auto& w : workers_)
    w->park();
  return sched_->inflight();
}

DataPath::~DataPath() {
  if (runtime_) {
    for (size_t i = 0; i < workers_.size(); ++i)
      runtime_->lcore(worker_lcores_[i])->remove_service(workers_[i].get());
    for (size_t i = 0; i < rx_.size(); ++i)
      runtime_->lcore(rx_lcores_[i])->remove_service(rx_[i].get());
    if (sched_service_) runtime_->lcore(sched_service_lcore_)->remove_service(sched_service_.get());
    if (direct_) runtime_->lcore(direct_lcore_)->remove_service(direct_.get());
    for (auto& s : control_services_)
      runtime_->control().remove_service(s.get());
  }
  if (ports_started_) {
    for (auto it = start_order_.rbegin(); it != start_order_.rend(); ++it)
      (*it)->stop();
  }
}

}  // namespace vecflow
