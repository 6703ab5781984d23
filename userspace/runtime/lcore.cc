#include "runtime/lcore.h"

#include "runtime/cycles.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>

#include <rte_cycles.h>
#include <rte_pause.h>

namespace vecflow {

Lcore::Lcore(unsigned id, BackoffConfig backoff)
    : id_(id), backoff_(backoff), list_(new ServiceList{}) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Lcore::~Lcore() {
  deferred_.clear();
  delete list_.load();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Lcore::wake() noexcept {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: the lcore is woken anyway
}

uint64_t Lcore::round_age_ns() const noexcept {
  uint64_t start = round_start_tsc_.load(std::memory_order_relaxed);
  if (start == 0) return 0;
  uint64_t now = rte_rdtsc();
  return now > start ? tsc_to_ns(now - start) : 0;
}

void Lcore::request_stop() noexcept {
  stop_.store(true, std::memory_order_relaxed);
  wake();
}

void Lcore::set_services(std::vector<std::shared_ptr<Service>> services) {
  publish(std::move(services), true);
}

void Lcore::free_deferred_locked() noexcept {
  const bool stopped = !running();
  const uint64_t now = round_.load(std::memory_order_acquire);
  std::erase_if(deferred_, [&](const auto& d) { return stopped || now > d.first; });
}

void Lcore::publish(std::vector<std::shared_ptr<Service>> services, bool wait) {
  auto fresh = std::make_unique<ServiceList>(ServiceList{std::move(services)});
  std::unique_ptr<ServiceList> old;
  uint64_t seen;
  {
    std::lock_guard lock(writer_mutex_);
    old.reset(list_.exchange(fresh.release(), std::memory_order_seq_cst));
    // A round that ends after the exchange started after it... or was in progress and will
    // not look at the list again. Either way one completed round after this read is enough.
    seen = round_.load(std::memory_order_seq_cst);
    free_deferred_locked();
    if (!wait && thread_.load() != std::this_thread::get_id()) {
      deferred_.emplace_back(seen, std::move(old));
      wake();
      return;
    }
  }
  if (thread_.load() == std::this_thread::get_id()) {
    // Called from a service of this lcore: the loop may be iterating `old` right now.
    retired_.push_back(std::move(old));
    return;
  }
  wake();
  while (running() && round_.load(std::memory_order_acquire) == seen) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

std::vector<std::shared_ptr<Service>> Lcore::services() const {
  std::lock_guard lock(writer_mutex_);
  return list_.load()->services;
}

void Lcore::add_service(std::shared_ptr<Service> service) {
  auto list = services();
  list.push_back(std::move(service));
  publish(std::move(list), false);
}

bool Lcore::remove_service(const Service* service) {
  auto list = services();
  auto it = std::find_if(list.begin(), list.end(),
                         [service](const auto& s) { return s.get() == service; });
  if (it == list.end()) return false;
  list.erase(it);
  set_services(std::move(list));
  return true;
}

bool Lcore::sleep_on_descriptors(const ServiceList& list) noexcept {
  const auto& services = list.services;
  if (services.empty()) return false;
  wake_fds_.clear();
  size_t armed = 0;
  for (; armed < services.size(); ++armed) {
    if (!services[armed]->arm_wakeup(wake_fds_)) break;
  }
  const bool slept = armed == services.size();
  if (slept) {
    pollfd fds[WakeFds::kMaxFds + 1];
    fds[0] = pollfd{wake_fd_, POLLIN, 0};
    for (size_t i = 0; i < wake_fds_.size(); ++i)
      fds[i + 1] = pollfd{wake_fds_.fd(i), POLLIN, 0};
    for (const auto& s : services) {
      s->stats().sleeps.add();
      s->stats().sleeping.store(true, std::memory_order_relaxed);
    }
    stats_.interrupt_sleeps.add();
    // Without a deadline from a service, no timeout: every service has said its descriptors
    // will wake it, and a stop or a service change writes the eventfd.
    const uint64_t us = wake_fds_.within_us();
    timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    ppoll(fds, wake_fds_.size() + 1, us == WakeFds::kForever ? nullptr : &ts, nullptr);
    for (const auto& s : services)
      s->stats().sleeping.store(false, std::memory_order_relaxed);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(wake_fd_, &v, sizeof(v));
      (void)r;
    }
  }
  for (size_t i = 0; i < armed; ++i)
    services[i]->disarm_wakeup();
  return slept;
}

void Lcore::idle_wait(uint32_t& nap_us) noexcept {
  const ServiceList* list = list_.load(std::memory_order_acquire);
  for (const auto& s : list->services) {
    if (s->has_pending()) {
      rte_pause();
      return;
    }
  }
  const uint64_t t0 = rte_rdtsc();
  if (sleep_on_descriptors(*list)) {
    stats_.sleep_cycles.add(rte_rdtsc() - t0);
    nap_us = 1;
    return;
  }
  // Nap on the eventfd so a stop or a service change ends the nap at once.
  pollfd pfd{wake_fd_, POLLIN, 0};
  timespec ts{0, static_cast<long>(nap_us) * 1000};
  if (ppoll(&pfd, 1, &ts, nullptr) > 0) {
    uint64_t v;
    ssize_t r = read(wake_fd_, &v, sizeof(v));
    (void)r;
  }
  stats_.naps.add();
  stats_.sleep_cycles.add(rte_rdtsc() - t0);
  nap_us = std::min(nap_us * 2, backoff_.idle_sleep_max_us);
}

void Lcore::run() noexcept {
  // Naps are microseconds long; the default 50 us timer slack would stretch each of them.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  tsc_hz();  // measured once, before the loop needs it
  thread_.store(std::this_thread::get_id());
  running_.store(true, std::memory_order_release);
  bool idle = false;
  uint32_t nap_us = 1;
  uint64_t idle_since = 0;
  const uint64_t spin_cycles = tsc_hz() / 1000000 * backoff_.spin_us;
  uint64_t round = round_.load(std::memory_order_relaxed);
  const uint64_t stall_cycles = tsc_hz() / 1000 * backoff_.stall_after_ms;
  if (qsbr_ != nullptr) qsbr_->online(qsbr_reader_);

  while (!stop_.load(std::memory_order_relaxed)) {
    const ServiceList* list = list_.load(std::memory_order_acquire);
    bool any = false;
    uint64_t t = rte_rdtsc();
    const uint64_t round_start = t;
    round_start_tsc_.store(round_start, std::memory_order_relaxed);
    for (const auto& s : list->services) {
      bool worked = s->poll();
      uint64_t now = rte_rdtsc();
      ServiceStats& st = s->stats();
      st.polls.add();
      if (worked) {
        st.busy_polls.add();
        st.busy_cycles.add(now - t);
        stats_.busy_cycles.add(now - t);
      } else {
        st.idle_cycles.add(now - t);
        stats_.idle_cycles.add(now - t);
      }
      any |= worked;
      t = now;
    }
    // Quiescent point: from here on this lcore holds no pointer into `list`.
    round_.store(++round, std::memory_order_release);
    if (qsbr_ != nullptr) qsbr_->quiescent(qsbr_reader_);
    stats_.rounds.add();
    if (t - round_start >= stall_cycles) [[unlikely]] {
      stats_.stalls.add();
      stats_.stalled_cycles.add(t - round_start);
    }
    if (!retired_.empty()) retired_.clear();

    if (any) {
      idle = false;
      nap_us = 1;
      continue;
    }
    if (!idle) {
      idle = true;
      idle_since = t;
    }
    if (backoff_.busy_poll || t - idle_since < spin_cycles) {
      uint64_t p0 = rte_rdtsc();
      rte_pause();
      stats_.idle_cycles.add(rte_rdtsc() - p0);
      continue;
    }
    // Offline while napping or sleeping, so that table writers do not wait for an idle lcore.
    round_start_tsc_.store(0, std::memory_order_relaxed);
    if (qsbr_ != nullptr) qsbr_->offline(qsbr_reader_);
    idle_wait(nap_us);
    if (qsbr_ != nullptr) qsbr_->online(qsbr_reader_);
  }
  if (qsbr_ != nullptr) qsbr_->offline(qsbr_reader_);
  round_start_tsc_.store(0, std::memory_order_relaxed);
  round_.store(++round, std::memory_order_release);
  running_.store(false, std::memory_order_release);
  thread_.store(std::thread::id{});
}

}  // namespace vecflow
