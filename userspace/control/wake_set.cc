#include "control/wake_set.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace vecflow::control {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

Result<WakeSet> WakeSet::create() {
  WakeSet w;
  w.epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  w.timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  w.event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w.epoll_fd_ < 0 || w.timer_fd_ < 0 || w.event_fd_ < 0) {
    return fail("control plane: cannot create its wake-up descriptors: {}", std::strerror(errno));
  }
  // The timer and the event stay readable until drained (level-triggered): a wake-up from
  // them cannot be missed.
  for (int fd : {w.timer_fd_, w.event_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(w.epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return fail("control plane: epoll_ctl: {}", std::strerror(errno));
    }
  }
  return w;
}

WakeSet::WakeSet(WakeSet&& o) noexcept
    : epoll_fd_(o.epoll_fd_),
      timer_fd_(o.timer_fd_),
      event_fd_(o.event_fd_),
      deadlines_(std::move(o.deadlines_)) {
  o.epoll_fd_ = o.timer_fd_ = o.event_fd_ = -1;
}

WakeSet::~WakeSet() {
  close_fd(epoll_fd_);
  close_fd(timer_fd_);
  close_fd(event_fd_);
}

void WakeSet::add(int fd) noexcept {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void WakeSet::remove(int fd) noexcept {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void WakeSet::note_deadline(Clock::time_point when) {
  deadlines_.push(when);
}

void WakeSet::notify() noexcept {
  uint64_t one = 1;
  ssize_t n = write(event_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: the set is readable anyway
}

int WakeSet::arm() noexcept {
  // drain() dropped the deadlines Asio has run; one that passed since may not have run yet.
  if (!deadlines_.empty()) {
    if (deadlines_.top() <= Clock::now()) return -1;
    auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadlines_.top().time_since_epoch())
            .count();
    itimerspec its{};
    its.it_value.tv_sec = ns / 1'000'000'000;
    its.it_value.tv_nsec = ns % 1'000'000'000;
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
  }
  return epoll_fd_;
}

void WakeSet::drain() noexcept {
  // Deadlines up to now are run by the io_context::poll() that follows (its clock reads later).
  auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.top() <= now)
    deadlines_.pop();
  uint64_t v;
  ssize_t n = read(event_fd_, &v, sizeof(v));
  n = read(timer_fd_, &v, sizeof(v));
  (void)n;  // EAGAIN when nothing was pending
  epoll_event events[64];
  while (epoll_wait(epoll_fd_, events, 64, 0) == 64) {
  }
}

}  // namespace vecflow::control
