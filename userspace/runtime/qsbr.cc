#include "runtime/qsbr.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include <rte_common.h>
#include <rte_errno.h>
#include <rte_rcu_qsbr.h>

namespace vecflow {

namespace {

// The domain and reader the calling thread last went online as: a writer running on a
// reader's own thread reports that reader quiescent instead of waiting for it. Domains are
// told apart by serial number, not address, since a new domain may reuse a freed one's.
thread_local uint64_t tl_domain = 0;
thread_local unsigned tl_reader = 0;

std::atomic<uint64_t> g_next_serial{1};

}  // namespace

void Qsbr::Free::operator()(rte_rcu_qsbr* v) const noexcept {
  std::free(v);
}

Result<std::unique_ptr<Qsbr>> Qsbr::create(unsigned readers) {
  if (readers == 0) return fail("a grace-period domain needs at least one reader");
  size_t size = rte_rcu_qsbr_get_memsize(readers);
  // rte_rcu_qsbr is plain memory (no EAL allocation needed): aligned heap memory lets the
  // runtime create it before or without EAL, and tests use it the same way.
  size = RTE_ALIGN_CEIL(size, RTE_CACHE_LINE_SIZE);
  auto* v = static_cast<rte_rcu_qsbr*>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, size));
  if (v == nullptr) return fail("cannot allocate the grace-period state for {} readers", readers);
  std::unique_ptr<Qsbr> q(new Qsbr());
  q->v_.reset(v);
  q->readers_ = readers;
  q->serial_ = g_next_serial.fetch_add(1);
  q->online_.reset(new std::atomic<bool>[readers]);
  for (unsigned i = 0; i < readers; ++i)
    q->online_[i].store(false, std::memory_order_relaxed);
  if (rte_rcu_qsbr_init(v, readers) != 0)
    return fail("rte_rcu_qsbr_init({}): {}", readers, rte_strerror(rte_errno));
  // Every reader is registered up front and starts offline: registration is a bitmap update,
  // and an offline reader costs a writer nothing.
  for (unsigned i = 0; i < readers; ++i) {
    if (rte_rcu_qsbr_thread_register(v, i) != 0)
      return fail("rte_rcu_qsbr_thread_register({}): {}", i, rte_strerror(rte_errno));
  }
  return q;
}

Qsbr::~Qsbr() = default;

void Qsbr::online(unsigned reader) noexcept {
  online_[reader].store(true, std::memory_order_relaxed);
  rte_rcu_qsbr_thread_online(v_.get(), reader);
  tl_domain = serial_;
  tl_reader = reader;
}

void Qsbr::offline(unsigned reader) noexcept {
  rte_rcu_qsbr_thread_offline(v_.get(), reader);
  online_[reader].store(false, std::memory_order_relaxed);
}

void Qsbr::quiescent(unsigned reader) noexcept {
  rte_rcu_qsbr_quiescent(v_.get(), reader);
}

void Qsbr::synchronize() noexcept {
  uint64_t token = rte_rcu_qsbr_start(v_.get());
  // Called from a service of an online lcore: that lcore is between data-path calls, so it is
  // quiescent. (rte_rcu_qsbr_synchronize would also mark an offline caller online; this does
  // not.)
  if (tl_domain == serial_ && online_[tl_reader].load(std::memory_order_relaxed))
    rte_rcu_qsbr_quiescent(v_.get(), tl_reader);
  rte_rcu_qsbr_check(v_.get(), token, true);
}

}  // namespace vecflow
