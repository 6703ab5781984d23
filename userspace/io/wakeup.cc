#include "io/wakeup.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "io/port.h"

namespace vecflow {

Result<QueueWakeups> QueueWakeups::create() {
  QueueWakeups w;
  w.epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (w.epfd_ < 0) return fail("epoll_create1: {}", strerror(errno));
  return w;
}

QueueWakeups::QueueWakeups(QueueWakeups&& o) noexcept {
  *this = std::move(o);
}

QueueWakeups& QueueWakeups::operator=(QueueWakeups&& o) noexcept {
  if (this != &o) {
    if (epfd_ >= 0) close(epfd_);
    epfd_ = std::exchange(o.epfd_, -1);
    queues_ = std::move(o.queues_);
    armed_ = std::exchange(o.armed_, 0);
  }
  return *this;
}

QueueWakeups::~QueueWakeups() {
  if (epfd_ >= 0) close(epfd_);
}

void QueueWakeups::add(Port* port, uint16_t queue) {
  queues_.push_back(Entry{port, queue, -1});
}

int QueueWakeups::arm() noexcept {
  armed_ = 0;
  for (Entry& e : queues_) {
    int fd = e.port->arm_wakeup(e.queue);
    if (fd < 0) {
      disarm();
      return -1;
    }
    ++armed_;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = armed_;
    // EEXIST: two queues share one descriptor (one socket serving both); once is enough.
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0) {
      e.fd = fd;
    } else if (errno != EEXIST) {
      disarm();
      return -1;
    }
  }
  return queues_.empty() ? -1 : epfd_;
}

void QueueWakeups::disarm() noexcept {
  for (size_t i = 0; i < armed_; ++i) {
    Entry& e = queues_[i];
    if (e.fd >= 0) {
      epoll_ctl(epfd_, EPOLL_CTL_DEL, e.fd, nullptr);
      e.fd = -1;
    }
    e.port->disarm_wakeup(e.queue);
  }
  armed_ = 0;
}

}  // namespace vecflow
