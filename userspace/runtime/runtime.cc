#include "runtime/runtime.h"

#include <algorithm>

#include <rte_launch.h>
#include <rte_lcore.h>

#include "core/log.h"

namespace vecflow {

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  auto eal = Eal::init(options.eal);
  if (!eal) return std::unexpected(eal.error());
  auto rt = std::unique_ptr<Runtime>(new Runtime());
  rt->eal_ = std::move(*eal);
  const auto& workers = options.eal.worker_lcores;
  bool control_is_worker =
      std::find(workers.begin(), workers.end(), options.eal.control_lcore) != workers.end();
  rt->lcores_.push_back(std::make_unique<Lcore>(
      options.eal.control_lcore,
      control_is_worker ? options.backoff : options.control_backoff.value_or(options.backoff)));
  for (unsigned id : options.eal.worker_lcores) {
    if (id == options.eal.control_lcore) continue;
    rt->lcores_.push_back(std::make_unique<Lcore>(id, options.backoff));
  }
  auto qsbr = Qsbr::create(static_cast<unsigned>(rt->lcores_.size()));
  if (!qsbr) return std::unexpected(qsbr.error());
  rt->qsbr_ = std::move(*qsbr);
  for (size_t i = 0; i < rt->lcores_.size(); ++i)
    rt->lcores_[i]->attach_qsbr(rt->qsbr_.get(), static_cast<unsigned>(i));
  return rt;
}

Runtime::~Runtime() {
  request_stop();
  join();
  lcores_.clear();
  eal_.reset();
}

Lcore* Runtime::lcore(unsigned id) noexcept {
  for (auto& l : lcores_) {
    if (l->id() == id) return l.get();
  }
  return nullptr;
}

size_t Runtime::slot(unsigned id) const noexcept {
  for (size_t i = 0; i < lcores_.size(); ++i) {
    if (lcores_[i]->id() == id) return i;
  }
  return 0;
}

Result<void> Runtime::launch() {
  for (size_t i = 1; i < lcores_.size(); ++i) {
    Lcore* l = lcores_[i].get();
    int rc = rte_eal_remote_launch(
        [](void* arg) {
          static_cast<Lcore*>(arg)->run();
          return 0;
        },
        l, l->id());
    if (rc != 0) {
      request_stop();
      join();
      return fail("cannot launch lcore {}: {}", l->id(), errno_text(rc));
    }
  }
  launched_ = true;
  log::get("runtime")->info("{} lcore(s) running (control lcore {})", lcores_.size(),
                            control().id());
  return {};
}

void Runtime::run_control() noexcept {
  control().run();
}

void Runtime::request_stop() noexcept {
  for (auto& l : lcores_)
    l->request_stop();
}

void Runtime::join() noexcept {
  if (!launched_) return;
  for (size_t i = 1; i < lcores_.size(); ++i)
    rte_eal_wait_lcore(lcores_[i]->id());
  launched_ = false;
}

}  // namespace vecflow
