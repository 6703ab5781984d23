// A pointer to an immutable object that the data path reads without a lock and the control
// thread replaces as a whole: readers see the old or the new object, never a half-built one,
// and the old one is freed only after every lcore passed a quiescent point (runtime/qsbr.h).
#pragma once

#include <atomic>
#include <memory>

#include "runtime/qsbr.h"

namespace vecflow {

template <typename T>
class RcuPtr {
 public:
  RcuPtr() = default;
  explicit RcuPtr(std::unique_ptr<T> initial) : p_(initial.release()) {}
  ~RcuPtr() { delete p_.load(std::memory_order_relaxed); }
  RcuPtr(const RcuPtr&) = delete;
  RcuPtr& operator=(const RcuPtr&) = delete;

  // Data path: load once per vector and use the object only until the lcore's next quiescent
  // point (the end of the service poll).
  const T* load() const noexcept { return p_.load(std::memory_order_acquire); }
  T* load_mutable() const noexcept { return p_.load(std::memory_order_acquire); }

  // Control thread (writers serialised by the caller): publishes `next`, waits until no lcore
  // can still hold the previous object, and returns it: nobody else references it any more,
  // so the caller may read its final counters and free it.
  std::unique_ptr<T> exchange(std::unique_ptr<T> next, Qsbr& qsbr) noexcept {
    std::unique_ptr<T> old(p_.exchange(next.release(), std::memory_order_acq_rel));
    qsbr.synchronize();
    return old;
  }
  void replace(std::unique_ptr<T> next, Qsbr& qsbr) noexcept { exchange(std::move(next), qsbr); }

 private:
  std::atomic<T*> p_{nullptr};
};

}  // namespace vecflow
