#include "sched/eventdev.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include <rte_bus_vdev.h>
#include <rte_errno.h>
#include <rte_eventdev.h>
#include <rte_service.h>
#include <rte_service_component.h>

#include "core/log.h"
#include "runtime/service.h"

namespace vecflow::sched {
namespace {

// Port depth asked of the device: the largest burst vecflow passes, within what the device
// offers. Deeper worker ports let a software device push more per scheduling round but hold
// more events away from other workers.
constexpr uint32_t kPortDepth = 2 * kMaxEventBurst;

bool is_vdev_name(const std::string& name) {
  return name.rfind("event_", 0) == 0;
}

class EventdevPort final : public EventPort {
 public:
  EventdevPort(PortRole role, uint16_t index, uint8_t dev, uint8_t port, bool maintain)
      : EventPort(role, index), dev_(dev), port_(port) {
    needs_maintenance_ = maintain;
  }

  uint16_t enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept override {
    uint16_t ok = rte_event_enqueue_new_burst(dev_, port_, ev, n);
    count_in(ev, ok);
    counters_.enq_new.add(ok);
    if (ok != n) counters_.refused.add(n - ok);
    return ok;
  }

  uint16_t enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept override {
    uint16_t ok = rte_event_enqueue_forward_burst(dev_, port_, ev, n);
    count_in(ev, ok);
    uint16_t matched = static_cast<uint16_t>(std::min<uint32_t>(ok, pending_));
    pending_ -= matched;
    counters_.enq_new.add(ok - matched);  // forwards beyond the dequeued events are new
    counters_.enq_forward.add(ok);
    if (ok != n) counters_.refused.add(n - ok);
    return ok;
  }

  uint16_t enqueue_burst(const rte_event* ev, uint16_t n) noexcept override {
    uint16_t ok = rte_event_enqueue_burst(dev_, port_, ev, n);
    uint64_t news = 0, fwds = 0, rels = 0;
    for (uint16_t i = 0; i < ok; ++i) {
      const rte_event& e = ev[i];
      if (e.op == RTE_EVENT_OP_RELEASE) {
        if (pending_) {
          --pending_;
          ++rels;
        }
        continue;
      }
      counters_.queue_in[e.queue_id].add();
      if (e.op == RTE_EVENT_OP_FORWARD && pending_ > 0) {
        --pending_;
        ++fwds;
      } else {
        ++news;
      }
    }
    counters_.enq_new.add(news);
    counters_.enq_forward.add(fwds);
    counters_.enq_release.add(rels);
    if (ok != n) counters_.refused.add(n - ok);
    return ok;
  }

  uint16_t dequeue_burst(rte_event* ev, uint16_t n) noexcept override {
    if (role() != PortRole::Worker) return 0;
    if (pending_) {
      counters_.enq_release.add(pending_);  // implicit release by this dequeue
      pending_ = 0;
    }
    uint16_t got = rte_event_dequeue_burst(dev_, port_, ev, n, 0);
    counters_.dequeue_calls.add();
    if (got == 0) {
      counters_.empty_dequeues.add();
      return 0;
    }
    pending_ = got;
    counters_.dequeued.add(got);
    count_queues(counters_.queue_out, ev, got);
    return got;
  }

  void maintain() noexcept override {
    if (needs_maintenance_) rte_event_maintain(dev_, port_, RTE_EVENT_DEV_MAINT_OP_FLUSH);
  }

  void park() noexcept override {
    if (pending_ == 0) return;
    // Release the last burst explicitly: no further dequeue will do it.
    rte_event rel[kMaxEventBurst];
    while (pending_ > 0) {
      uint16_t k = static_cast<uint16_t>(std::min<uint32_t>(pending_, kMaxEventBurst));
      for (uint16_t i = 0; i < k; ++i) {
        rel[i] = rte_event{};
        rel[i].op = RTE_EVENT_OP_RELEASE;
      }
      uint16_t ok = rte_event_enqueue_burst(dev_, port_, rel, k);
      counters_.enq_release.add(ok);
      pending_ -= ok;
      if (ok == 0) break;
    }
    maintain();
  }

 private:
  void count_in(const rte_event* ev, uint16_t n) noexcept {
    count_queues(counters_.queue_in, ev, n);
  }

  // Per-queue counts, as runs (a burst usually holds one queue), the way the builtin backend
  // counts: the same bookkeeping cost on both sides of the comparison.
  static void count_queues(std::array<Counter, kMaxQueues>& c, const rte_event* ev,
                           uint16_t n) noexcept {
    if (n == 0) return;
    uint8_t q = ev[0].queue_id;
    uint32_t run = 0;
    for (uint16_t i = 0; i < n; ++i) {
      if (ev[i].queue_id != q) {
        c[q].add(run);
        q = ev[i].queue_id;
        run = 0;
      }
      ++run;
    }
    c[q].add(run);
  }

  uint8_t dev_;
  uint8_t port_;
  uint32_t pending_ = 0;
};

class EventdevScheduler;

// Runs a device's scheduling function (event_sw) as a vecflow service.
class ScheduleService final : public Service {
 public:
  ScheduleService(std::string name, const Scheduler& sched, uint8_t dev, uint32_t service_id)
      : Service(std::move(name)), sched_(sched), dev_(dev), service_id_(service_id) {
    // event_sw reports in an xstat whether its last scheduling round moved anything; other
    // devices' services are assumed busy whenever events are in flight.
    // DPDK marks "no such statistic" by leaving the id at (unsigned int)-1.
    constexpr uint64_t kNoStat = static_cast<unsigned int>(-1);
    uint64_t id = kNoStat;
    rte_event_dev_xstats_by_name_get(dev, "dev_sched_progress_last_iter", &id);
    if (id != kNoStat) {
      progress_id_ = id;
      has_progress_ = true;
    }
  }

  bool poll() noexcept override {
    rte_service_run_iter_on_app_lcore(service_id_, 1);
    if (!has_progress_) return sched_.inflight() > 0;
    uint64_t v = 0;
    rte_event_dev_xstats_get(dev_, RTE_EVENT_DEV_XSTATS_DEVICE, 0, &progress_id_, &v, 1);
    return v != 0;
  }

  // Events in flight may need scheduling at any moment: do not nap while there are any.
  bool has_pending() const noexcept override { return sched_.inflight() > 0; }

 private:
  const Scheduler& sched_;
  uint8_t dev_;
  uint32_t service_id_;
  uint64_t progress_id_ = 0;
  bool has_progress_ = false;
};

void flush_leftover(uint8_t, rte_event ev, void* arg) {
  free_payload(ev);
  static_cast<std::atomic<uint64_t>*>(arg)->fetch_add(1, std::memory_order_relaxed);
}

class EventdevScheduler final : public Scheduler {
 public:
  explicit EventdevScheduler(const SchedulerConfig& c) : Scheduler(c.queues) {}

  ~EventdevScheduler() override {
    if (service_) rte_service_runstate_set(service_id_, 0);
    if (started_) {
      rte_event_dev_stop(dev_);
      uint64_t left = leftovers_.load();
      if (left > 0) {
        log::get("sched")->warn("{} stopped with {} event(s) in flight; freed", name_, left);
      }
    }
    if (configured_) rte_event_dev_close(dev_);
    if (created_vdev_) {
      rte_vdev_uninit(name_.c_str());
      // DPDK 22.11's event_sw does not unregister its service when removed, and EAL has
      // RTE_SERVICE_NUM_MAX (64) service slots: release it, or the 64th device fails.
      if (service_) rte_service_component_unregister(service_id_);
    }
  }

  Result<void> init(const SchedulerConfig& c) {
    name_ = c.device;
    int id = rte_event_dev_get_dev_id(name_.c_str());
    if (id < 0 && is_vdev_name(name_)) {
      int rc = rte_vdev_init(name_.c_str(), c.devargs.c_str());
      if (rc != 0) {
        return fail("scheduler.device: cannot create event device '{}' ({}): {}", name_,
                    c.devargs.empty() ? "no devargs" : c.devargs, errno_text(rc));
      }
      created_vdev_ = true;
      id = rte_event_dev_get_dev_id(name_.c_str());
    }
    if (id < 0) {
      return fail(
          "scheduler.device: no event device named '{}' (software devices: event_dsw0, "
          "event_sw0; hardware ones must be probed by EAL first)",
          name_);
    }
    dev_ = static_cast<uint8_t>(id);
    rte_event_dev_info info;
    if (int rc = rte_event_dev_info_get(dev_, &info); rc != 0)
      return fail("{}: cannot read device info: {}", name_, errno_text(rc));
    driver_ = info.driver_name ? info.driver_name : name_;

    const uint32_t nq = static_cast<uint32_t>(c.queues.size());
    const uint32_t np = static_cast<uint32_t>(c.producers) + c.workers;
    if (nq == 0 || nq > info.max_event_queues || nq > kMaxQueues)
      return fail("{}: {} queues asked, the device offers {}", name_, nq,
                  std::min<uint32_t>(info.max_event_queues, kMaxQueues));
    if (np > info.max_event_ports)
      return fail("{}: {} ports asked ({} producers + {} workers), the device offers {}", name_, np,
                  c.producers, c.workers, info.max_event_ports);
    if (info.max_num_events > 0 && c.inflight_limit > static_cast<uint32_t>(info.max_num_events))
      return fail("{}: scheduler.queue_depth {} is above the device's {} events in flight", name_,
                  c.inflight_limit, info.max_num_events);
    if (info.max_event_port_dequeue_depth < kMaxEventBurst)
      return fail("{}: dequeue depth {} is below vecflow's burst {}", name_,
                  info.max_event_port_dequeue_depth, kMaxEventBurst);

    rte_event_dev_config dc{};
    dc.nb_event_queues = static_cast<uint8_t>(nq);
    dc.nb_event_ports = static_cast<uint8_t>(np);
    dc.nb_events_limit = static_cast<int32_t>(c.inflight_limit);
    dc.nb_event_queue_flows = std::min<uint32_t>(info.max_event_queue_flows, kFlowIdMask + 1);
    dc.nb_event_port_dequeue_depth =
        std::min<uint32_t>(info.max_event_port_dequeue_depth, kPortDepth);
    dc.nb_event_port_enqueue_depth =
        std::min<uint32_t>(info.max_event_port_enqueue_depth, kPortDepth);
    dc.dequeue_timeout_ns = info.min_dequeue_timeout_ns;
    if (int rc = rte_event_dev_configure(dev_, &dc); rc != 0)
      return fail("{}: configure failed: {}", name_, errno_text(rc));
    configured_ = true;

    for (uint32_t q = 0; q < nq; ++q) {
      rte_event_queue_conf qc{};
      if (int rc = rte_event_queue_default_conf_get(dev_, static_cast<uint8_t>(q), &qc); rc != 0)
        return fail("{}: queue {} defaults: {}", name_, q, errno_text(rc));
      qc.schedule_type = static_cast<uint8_t>(c.queues[q].type);
      qc.event_queue_cfg = 0;
      qc.nb_atomic_flows = dc.nb_event_queue_flows;
      qc.nb_atomic_order_sequences = std::max<uint32_t>(qc.nb_atomic_order_sequences, 1);
      if (c.queues[q].type == SchedType::Ordered)
        qc.nb_atomic_order_sequences =
            std::min<uint32_t>(c.inflight_limit, dc.nb_event_queue_flows);
      if (int rc = rte_event_queue_setup(dev_, static_cast<uint8_t>(q), &qc); rc != 0) {
        return fail("{}: queue '{}' ({}): {}{}", name_, c.queues[q].name,
                    to_string(c.queues[q].type), errno_text(rc),
                    rc == -ENOTSUP ? " (the device does not offer this schedule type)" : "");
      }
    }
    const bool maintain = !(info.event_dev_cap & RTE_EVENT_DEV_CAP_MAINTENANCE_FREE);
    std::vector<uint8_t> all_queues(nq);
    for (uint32_t q = 0; q < nq; ++q)
      all_queues[q] = static_cast<uint8_t>(q);
    for (uint32_t p = 0; p < np; ++p) {
      rte_event_port_conf pc{};
      if (int rc = rte_event_port_default_conf_get(dev_, static_cast<uint8_t>(p), &pc); rc != 0)
        return fail("{}: port {} defaults: {}", name_, p, errno_text(rc));
      pc.new_event_threshold = static_cast<int32_t>(c.inflight_limit);
      pc.dequeue_depth = static_cast<uint16_t>(dc.nb_event_port_dequeue_depth);
      pc.enqueue_depth = static_cast<uint16_t>(dc.nb_event_port_enqueue_depth);
      const bool worker = p >= c.producers;
      pc.event_port_cfg =
          worker ? RTE_EVENT_PORT_CFG_HINT_WORKER : RTE_EVENT_PORT_CFG_HINT_PRODUCER;
      if (int rc = rte_event_port_setup(dev_, static_cast<uint8_t>(p), &pc); rc != 0)
        return fail("{}: port {} setup: {}", name_, p, errno_text(rc));
      if (worker) {
        int linked = rte_event_port_link(dev_, static_cast<uint8_t>(p), all_queues.data(), nullptr,
                                         static_cast<uint16_t>(nq));
        if (linked != static_cast<int>(nq))
          return fail("{}: linking port {} to {} queues: {}", name_, p, nq,
                      rte_strerror(rte_errno));
      }
      ports_.push_back(
          std::make_unique<EventdevPort>(worker ? PortRole::Worker : PortRole::Producer,
                                         static_cast<uint16_t>(worker ? p - c.producers : p), dev_,
                                         static_cast<uint8_t>(p), maintain));
    }
    producers_ = c.producers;
    workers_ = c.workers;

    uint32_t sid = 0;
    if (rte_event_dev_service_id_get(dev_, &sid) == 0) {
      // The device schedules in a DPDK service: vecflow's runtime runs it (ScheduleService),
      // not a DPDK service core, so it is accounted and backed off like any other service.
      service_id_ = sid;
      rte_service_runstate_set(sid, 1);
      rte_service_set_runstate_mapped_check(sid, 0);
      service_ = std::make_shared<ScheduleService>("sched-" + name_, *this, dev_, sid);
    }
    rte_event_dev_stop_flush_callback_register(dev_, flush_leftover, &leftovers_);
    if (int rc = rte_event_dev_start(dev_); rc != 0)
      return fail("{}: start failed: {}", name_, errno_text(rc));
    started_ = true;
    return {};
  }

  std::string_view backend() const noexcept override { return driver_; }
  uint16_t producer_count() const noexcept override { return producers_; }
  uint16_t worker_count() const noexcept override { return workers_; }
  EventPort& producer(uint16_t i) noexcept override { return *ports_[i]; }
  EventPort& worker(uint16_t i) noexcept override { return *ports_[producers_ + i]; }
  std::shared_ptr<Service> service() const noexcept override { return service_; }

  SchedulerStats stats() const override {
    SchedulerStats s;
    s.backend = driver_;
    fill_common_stats(s);
    s.inflight = inflight();
    return s;
  }

 private:
  std::string name_;
  std::string driver_;
  uint8_t dev_ = 0;
  bool created_vdev_ = false;
  bool configured_ = false;
  bool started_ = false;
  std::vector<std::unique_ptr<EventdevPort>> ports_;
  uint16_t producers_ = 0;
  uint16_t workers_ = 0;
  uint32_t service_id_ = 0;
  std::shared_ptr<ScheduleService> service_;
  std::atomic<uint64_t> leftovers_{0};
};

}  // namespace

Result<std::unique_ptr<Scheduler>> create_eventdev_scheduler(const SchedulerConfig& config) {
  auto s = std::make_unique<EventdevScheduler>(config);
  if (auto r = s->init(config); !r) return std::unexpected(r.error());
  return std::unique_ptr<Scheduler>(std::move(s));
}

}  // namespace vecflow::sched
