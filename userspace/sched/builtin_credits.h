// The builtin scheduler's in-flight limit as credits (sched/builtin_backend.h, kMinCreditLoan):
// one CreditPool per scheduler, shared by its ports, and one Credits per port, which takes from
// the pool in loans and gives back what it holds beyond two. A port takes a credit for each new
// event it enqueues and gives one back for each event it releases, so the events in flight
// never exceed the pool's limit.
//
// Threading: the pool's counter is the only shared state (relaxed atomics: the limit may be
// overshot by a loan in flight and is corrected at once, never by more); a Credits belongs to
// the port's lcore.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "sched/builtin_backend.h"

namespace vecflow::sched {

class CreditPool {
 public:
  // The limit for `ports` ports sharing `inflight_limit`: a loan is an eighth of a port's
  // share within [kMinCreditLoan, kMaxCreditLoan], and the limit is raised so that every port
  // can hold two loans (ports parking credits cannot starve the others).
  void configure(uint32_t inflight_limit, uint32_t ports) noexcept {
    loan_ = std::clamp<int32_t>(static_cast<int32_t>(inflight_limit / (8 * ports)), kMinCreditLoan,
                                kMaxCreditLoan);
    limit_ = std::max<int64_t>(inflight_limit, int64_t{ports} * 2 * loan_);
    ports_ = ports;
  }
  int64_t limit() const noexcept { return limit_; }
  int32_t loan() const noexcept { return loan_; }
  // What a port can hope to hold when the scheduler is drained: every other port may keep two
  // loans.
  int64_t attainable() const noexcept {
    return std::max<int64_t>(loan_, limit_ - int64_t{ports_} * 2 * loan_);
  }
  int64_t available() const noexcept { return limit_ - on_loan_.load(std::memory_order_relaxed); }

 private:
  friend class Credits;
  int64_t limit_ = 0;
  int32_t loan_ = 0;
  uint32_t ports_ = 0;
  // Written by every port once per loan: on a line of its own, or each loan would also take
  // the fields read on every call away from the other cores.
  alignas(64) std::atomic<int64_t> on_loan_{0};
};

class Credits {
 public:
  explicit Credits(CreditPool& pool) noexcept : pool_(pool) {}

  // Takes up to `n` credits; returns how many it got (fewer only when the pool is short).
  uint16_t take(uint16_t n) noexcept {
    if (held_ >= n) [[likely]] {
      held_ -= n;
      return n;
    }
    // Read before writing: when the pool is empty (overload) a refused port must not keep
    // bouncing the shared counter's cache line with add-then-undo.
    int32_t loan = static_cast<int32_t>(std::min<int64_t>(std::max<int32_t>(n - held_, pool_.loan_),
                                                          std::max<int64_t>(pool_.available(), 0)));
    if (loan != 0) {
      const int64_t after = pool_.on_loan_.fetch_add(loan, std::memory_order_relaxed) + loan;
      if (after > pool_.limit_) {
        const int64_t excess = std::min<int64_t>(after - pool_.limit_, loan);
        pool_.on_loan_.fetch_sub(excess, std::memory_order_relaxed);
        loan -= static_cast<int32_t>(excess);
      }
      held_ += loan;
    }
    const uint16_t granted = static_cast<uint16_t>(std::min<int32_t>(n, held_));
    held_ -= granted;
    return granted;
  }

  // Gives back `n` credits; beyond two loans, the pool gets the rest.
  void give_back(uint32_t n) noexcept {
    held_ += static_cast<int32_t>(n);
    if (held_ > 2 * pool_.loan_) {
      pool_.on_loan_.fetch_sub(held_ - pool_.loan_, std::memory_order_relaxed);
      held_ = pool_.loan_;
    }
  }

  // Whether take(want) would find them (for has_room: no loan is taken).
  bool could_take(int64_t want) const noexcept {
    return held_ >= want || pool_.available() >= want - held_;
  }

 private:
  CreditPool& pool_;
  int32_t held_ = 0;
};

}  // namespace vecflow::sched
