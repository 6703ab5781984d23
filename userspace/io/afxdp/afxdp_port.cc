#include "io/afxdp/afxdp_port.h"

#include <fcntl.h>
#include <linux/if_xdp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <xdp/xsk.h>

#include "core/error.h"
#include "core/log.h"
#include "io/afxdp/pmd_queue.h"
#include "io/hardware.h"
#include "io/packet_pool.h"
#include "io/rx_queues.h"

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

namespace vecflow {
namespace {

// Largest number of buffers moved to a fill ring, or reclaimed from a completion ring, in one
// step. Bounded so the temporary array lives on the stack; 64 matches the largest burst, so
// the common case (refill what one burst took) is a single step.
constexpr uint32_t kRingBatch = 64;

// sendto() calls per transmit burst at most. The kernel's copy-mode transmit sends 32
// descriptors per call; 8 calls cover a full 64-packet burst with room for stragglers, while
// a device that stays busy cannot hold the lcore for long.
constexpr uint32_t kMaxKicks = 8;

// One AF_XDP socket. The rx half (rx and fill rings) is touched only by the lcore polling the
// queue, the tx half (tx and completion rings) only by the lcore transmitting on it; each half
// has its own cache lines. libxdp keeps pointers to these ring structs: the object never moves.
struct Xsk {
  alignas(64) xsk_ring_cons rx{};
  xsk_ring_prod fq{};
  alignas(64) xsk_ring_prod tx{};
  xsk_ring_cons cq{};
  alignas(64) xsk_socket* socket = nullptr;
  int fd = -1;
  bool zero_copy = false;
  bool multi_buffer = false;  // bound with XDP_USE_SG: frames span descriptors
};

struct Queue {
  uint16_t device_queue = 0;
  QueueOwner owner = QueueOwner::Vecflow;
  std::unique_ptr<Xsk> xsk;  // vecflow-owned queues, while started
  PmdQueue pmd;              // DPDK-owned queues (io/afxdp/pmd_queue.h)
};

// Multi-buffer AF_XDP (Linux 6.6): a socket bound with XDP_USE_SG takes frames larger than one
// UMEM chunk (jumbo frames) as several descriptors, each but the last marked XDP_PKT_CONTD, on
// rx and tx alike. Named here because Debian 12's kernel headers (6.1) predate them.
constexpr uint16_t kXdpUseSg = 1 << 4;
constexpr uint32_t kXdpPktContd = 1 << 0;

// A buffer leaves through AF_XDP as it is when it belongs to the pool and nobody else holds it
// (the kernel reads it after tx_burst returned, and the completion frees it).
inline bool lendable(const PacketPool& pool, const rte_mbuf* s) noexcept {
  return pool.owns(s) && RTE_MBUF_DIRECT(s) && rte_mbuf_refcnt_read(s) == 1;
}

// The descriptors packet `m` takes as it is (one per segment, at most `max_descs`), or 0 when
// it must be copied into fresh buffers.
inline uint16_t as_is_descs(const PacketPool& pool, const rte_mbuf* m,
                            uint16_t max_descs) noexcept {
  if (m->nb_segs == 1) [[likely]]
    return lendable(pool, m) ? 1 : 0;
  if (m->nb_segs > max_descs) return 0;
  for (const rte_mbuf* s = m; s != nullptr; s = s->next)
    if (!lendable(pool, s)) return 0;
  return m->nb_segs;
}

}  // namespace

struct AfXdpPort::Impl {
  AfXdpOptions opt;
  PacketPool* pool = nullptr;
  std::string ifname;
  int ifindex = 0;
  MacAddress mac;
  int ctl = -1;     // AF_INET socket made in the interface's namespace, for ioctls later
  int map_fd = -1;  // duplicate of the steering program's XSKMAP
  std::unique_ptr<Queue[]> queues;
  uint16_t nqueues = 0;
  xsk_umem* umem = nullptr;
  uint16_t tag = 0;  // lender tag of the buffers this port's sockets hold (while started)
  bool started = false;
  std::unique_ptr<PmdQueues> pmd;  // while any queue is DPDK-owned

  ~Impl() {
    if (map_fd >= 0) close(map_fd);
    if (ctl >= 0) close(ctl);
  }

  Result<void> open_sockets();
  // Binds every vecflow-owned queue's socket in one mode; -errno of the first failure.
  int bind_sockets(uint16_t flags, uint16_t& failed_queue);
  void close_sockets() noexcept;
  void refill(Xsk& x) noexcept;
  void reclaim(Xsk& x) noexcept;
  void kick_tx(Xsk& x) noexcept;
};

AfXdpPort::AfXdpPort(std::string name, PortId id)
    : Port(std::move(name), id), impl_(std::make_unique<Impl>()) {}

AfXdpPort::~AfXdpPort() {
  stop();
  if (!impl_->pmd) return;
  for (uint16_t i = 0; i < impl_->nqueues; ++i)
    impl_->pmd->close(impl_->queues[i].pmd);
}

Result<std::unique_ptr<AfXdpPort>> AfXdpPort::create(std::string name, PortId id,
                                                     const AfXdpOptions& o, PacketPool& pool) {
  auto port = std::unique_ptr<AfXdpPort>(new AfXdpPort(name, id));
  Impl& im = *port->impl_;
  im.opt = o;
  im.opt.classify.port = id;
  im.pool = &pool;
  im.ifname = o.interface;
  if (o.ring_size == 0 || (o.ring_size & (o.ring_size - 1)) != 0) {
    return fail("port {}: ring_size {} is not a power of two", name, o.ring_size);
  }
  im.ifindex = static_cast<int>(if_nametoindex(o.interface.c_str()));
  if (im.ifindex == 0) {
    return fail("port {}: interface '{}' does not exist (in vecflow's network namespace)", name,
                o.interface);
  }
  im.ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (im.ctl < 0) return fail("port {}: socket: {}", name, strerror(errno));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, o.interface.c_str(), IFNAMSIZ - 1);
  if (ioctl(im.ctl, SIOCGIFHWADDR, &ifr) == 0) {
    std::memcpy(im.mac.bytes.data(), ifr.ifr_hwaddr.sa_data, 6);
  }

  auto have = interface_rx_queues(o.interface, im.ctl);
  if (!have) return fail("port {}: {}", name, have.error().message);
  std::vector<XskQueueRange> ranges = o.queues;
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  uint32_t total = 0;
  uint32_t own = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& r = ranges[i];
    if (r.count == 0) return fail("port {}: an empty queue range", name);
    if (r.first + r.count > *have) {
      return fail(
          "port {}: interface {} has {} rx queue(s) (0-{}), queues {}-{} were asked; lower "
          "`queues` or give the interface more channels (ethtool -L)",
          name, o.interface, *have, *have - 1, r.first, r.first + r.count - 1);
    }
    if (i > 0 && ranges[i - 1].first + ranges[i - 1].count > r.first) {
      return fail("port {}: queue ranges overlap at queue {}", name, r.first);
    }
    total += r.count;
    if (r.owner == QueueOwner::Vecflow) own += r.count;
  }
  // Buffers the port's sockets keep: a full fill ring per socket (the PMD keeps as many).
  uint64_t held = uint64_t{total} * o.ring_size;
  if (held * 2 > pool.count()) {
    return fail(
        "port {}: {} queue(s) with {}-entry rings would keep {} of the pool's {} buffers filled "
        "in the kernel; raise dpdk.mbufs to at least {} or lower ring_size",
        name, total, o.ring_size, held, pool.count(), held * 2);
  }
  im.nqueues = static_cast<uint16_t>(total);
  im.queues = std::make_unique<Queue[]>(total);
  uint16_t k = 0;
  for (const auto& r : ranges) {
    for (uint16_t d = 0; d < r.count; ++d, ++k) {
      im.queues[k].device_queue = static_cast<uint16_t>(r.first + d);
      im.queues[k].owner = r.owner;
    }
  }
  port->size_counters(im.nqueues, im.nqueues);
  for (uint16_t i = 0; i < im.nqueues; ++i) {
    Queue& q = im.queues[i];
    if (q.owner != QueueOwner::Dpdk) continue;
    if (!im.pmd) {
      // The PMD's AF_XDP rings take the port's ring size, within what it accepts.
      im.pmd = std::make_unique<PmdQueues>(
          PmdQueueOptions{name, id, o.interface, im.ifindex,
                          static_cast<uint16_t>(std::min<uint32_t>(o.ring_size, 32768)),
                          o.dpdk_xdp_prog, o.busy_poll ? o.busy_poll_budget : 0, &pool});
    }
    q.pmd.device_queue = q.device_queue;
    if (auto r = im.pmd->open(q.pmd); !r) return std::unexpected(r.error());
  }
  log::get("io")->info("port {}: AF_XDP on {} (ifindex {}), {} queue(s), {} read by vecflow", name,
                       o.interface, im.ifindex, total, own);
  return port;
}

Result<void> AfXdpPort::set_xsks_map(int map_fd) {
  Impl& im = *impl_;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (int rc = bpf_obj_get_info_by_fd(map_fd, &info, &len); rc != 0) {
    return fail("port {}: fd {} is not a BPF map: {}", name(), map_fd, errno_text(rc));
  }
  if (info.type != BPF_MAP_TYPE_XSKMAP) {
    return fail("port {}: map '{}' is not an XSKMAP", name(), info.name);
  }
  for (uint16_t i = 0; i < im.nqueues; ++i) {
    if (im.queues[i].device_queue >= info.max_entries) {
      return fail("port {}: XSKMAP '{}' has {} entries, queue {} needs one", name(), info.name,
                  info.max_entries, im.queues[i].device_queue);
    }
  }
  int dup = fcntl(map_fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return fail("port {}: dup: {}", name(), strerror(errno));
  if (im.map_fd >= 0) close(im.map_fd);
  im.map_fd = dup;
  return {};
}

Result<void> AfXdpPort::Impl::open_sockets() {
  bool any = false;
  for (uint16_t i = 0; i < nqueues; ++i)
    any |= queues[i].owner == QueueOwner::Vecflow;
  if (!any) return {};

  // Auto tries zero-copy first and falls back to copy when the driver refuses it. The sockets
  // after the first share its UMEM and inherit its mode and need_wakeup (the kernel rejects
  // bind flags with XDP_SHARED_UMEM).
  // Each mode is tried with multi-buffer first, then without it (kernels before 6.6, drivers
  // without multi-buffer zero-copy): such a socket takes frames of one chunk only, which the
  // steering program then never hands it (the kernel drops a larger one, counted in
  // XDP_STATISTICS rx_dropped, shown as frame_too_big).
  std::vector<uint16_t> modes;
  if (opt.bind != XskBind::Copy) modes.push_back(XDP_ZEROCOPY);
  if (opt.bind != XskBind::ZeroCopy) modes.push_back(XDP_COPY);
  std::vector<uint16_t> tries;
  for (uint16_t m : modes) {
    tries.push_back(m | kXdpUseSg);
    tries.push_back(m);
  }
  for (size_t t = 0; t < tries.size(); ++t) {
    uint16_t failed = 0;
    int rc = bind_sockets(tries[t], failed);
    if (rc == 0) break;
    close_sockets();
    if (rc == -ENOMEM || t + 1 == tries.size()) {
      return fail("cannot bind an AF_XDP socket to {} queue {} ({} mode): {}", ifname, failed,
                  tries[t] & XDP_ZEROCOPY ? "zero-copy" : "copy", errno_text(rc));
    }
  }

  const Xsk* bound = nullptr;
  for (uint16_t i = 0; i < nqueues && !bound; ++i)
    bound = queues[i].xsk.get();
  const uint32_t room = pool->chunk_size() - PacketPool::kBufferOffset - XDP_PACKET_HEADROOM;
  if (const uint32_t mtu = interface_mtu(ifname);
      bound && !bound->multi_buffer && mtu + 22 > room) {  // Ethernet and two VLAN tags
    log::get("io")->warn(
        "{}: MTU {} needs frames in several buffers, which this kernel's AF_XDP refused "
        "(multi-buffer: Linux 6.6): frames over {} bytes are dropped (frame_too_big)",
        ifname, mtu, room);
  }

  tag = 0;
  auto t = pool->open_lender();
  if (!t) {
    close_sockets();
    return std::unexpected(t.error());
  }
  tag = *t;
  for (uint16_t i = 0; i < nqueues; ++i) {
    Xsk* x = queues[i].xsk.get();
    if (!x) continue;
    xdp_options xo{};
    socklen_t len = sizeof(xo);
    if (getsockopt(x->fd, SOL_XDP, XDP_OPTIONS, &xo, &len) == 0) {
      x->zero_copy = xo.flags & XDP_OPTIONS_ZEROCOPY;
    }
    if (opt.busy_poll) {
      int one = 1;
      int timeout = static_cast<int>(opt.busy_poll_timeout_us);
      int budget = static_cast<int>(opt.busy_poll_budget);
      if (setsockopt(x->fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one)) != 0 ||
          setsockopt(x->fd, SOL_SOCKET, SO_BUSY_POLL, &timeout, sizeof(timeout)) != 0 ||
          setsockopt(x->fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof(budget)) != 0) {
        int err = errno;
        close_sockets();
        return fail("the kernel refused busy polling on {} queue {}: {}", ifname,
                    queues[i].device_queue, strerror(err));
      }
    }
    refill(*x);
    if (xsk_prod_nb_free(&x->fq, x->fq.size) != 0) {
      close_sockets();
      return fail("the packet pool ran out filling the fill ring of {} queue {} ({} in use of {})",
                  ifname, queues[i].device_queue, pool->in_use(), pool->count());
    }
  }
  return {};
}

static_assert(PacketPool::kOffsetShift == XSK_UNALIGNED_BUF_OFFSET_SHIFT &&
              PacketPool::kAddrMask == XSK_UNALIGNED_BUF_ADDR_MASK);

int AfXdpPort::Impl::bind_sockets(uint16_t flags, uint16_t& failed_queue) {
  xsk_umem_config ucfg{};
  ucfg.fill_size = opt.ring_size;
  ucfg.comp_size = opt.ring_size;
  ucfg.frame_size = pool->chunk_size();
  // Frames land after the mempool header and the rte_mbuf (and the kernel's own 256-byte
  // XDP headroom), i.e. in the mbuf's data room, RTE_PKTMBUF_HEADROOM or more into it.
  ucfg.frame_headroom = PacketPool::kBufferOffset;
  // Every mempool object is a chunk: on the aligned grid, or anywhere (io/packet_pool.h).
  ucfg.flags = pool->layout() == PoolLayout::Spread ? XDP_UMEM_UNALIGNED_CHUNK_FLAG : 0;

  Xsk* first = nullptr;
  for (uint16_t i = 0; i < nqueues; ++i) {
    if (queues[i].owner != QueueOwner::Vecflow) continue;
    queues[i].xsk = std::make_unique<Xsk>();
    if (!first) first = queues[i].xsk.get();
  }
  failed_queue = 0;
  int rc = xsk_umem__create(&umem, pool->base(), pool->bytes(), &first->fq, &first->cq, &ucfg);
  if (rc != 0) {
    umem = nullptr;
    return rc < 0 ? rc : -rc;
  }
  for (uint16_t i = 0; i < nqueues; ++i) {
    Xsk* x = queues[i].xsk.get();
    if (!x) continue;
    xsk_socket_config scfg{};
    scfg.rx_size = opt.ring_size;
    scfg.tx_size = opt.ring_size;
    scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;  // steering owns the program
    scfg.bind_flags = static_cast<uint16_t>(flags | XDP_USE_NEED_WAKEUP);
    rc = xsk_socket__create_shared(&x->socket, ifname.c_str(), queues[i].device_queue, umem, &x->rx,
                                   &x->tx, &x->fq, &x->cq, &scfg);
    if (rc != 0) {
      x->socket = nullptr;
      failed_queue = queues[i].device_queue;
      return rc < 0 ? rc : -rc;
    }
    x->fd = xsk_socket__fd(x->socket);
    x->multi_buffer = flags & kXdpUseSg;  // sockets sharing the UMEM inherit it (xsk_bind)
  }
  return 0;
}

void AfXdpPort::Impl::close_sockets() noexcept {
  // Sockets that share the UMEM first; the one on the UMEM's own descriptor goes with the UMEM.
  for (uint16_t i = 0; i < nqueues; ++i) {
    Xsk* x = queues[i].xsk.get();
    if (x && x->socket && umem && x->fd != xsk_umem__fd(umem)) {
      xsk_socket__delete(x->socket);
      x->socket = nullptr;
    }
  }
  for (uint16_t i = 0; i < nqueues; ++i) {
    Xsk* x = queues[i].xsk.get();
    if (x && x->socket) {
      xsk_socket__delete(x->socket);
      x->socket = nullptr;
    }
  }
  if (umem) {
    xsk_umem__delete(umem);
    umem = nullptr;
  }
  for (uint16_t i = 0; i < nqueues; ++i)
    queues[i].xsk.reset();
  // Every socket is closed: nothing can hand back a buffer lent under the tag any more.
  if (tag != 0) {
    uint32_t n = pool->close_lender(tag);
    log::get("io")->debug("{}: {} buffer(s) returned from the kernel's rings", ifname, n);
    tag = 0;
  }
}

void AfXdpPort::Impl::refill(Xsk& x) noexcept {
  uint32_t free = xsk_prod_nb_free(&x.fq, x.fq.size);
  rte_mbuf* bufs[kRingBatch];
  while (free > 0) {
    uint32_t n = std::min(free, kRingBatch);
    if (rte_pktmbuf_alloc_bulk(pool->mempool(), bufs, n) != 0) return;  // retried next poll
    uint32_t idx = 0;
    xsk_ring_prod__reserve(&x.fq, n, &idx);
    for (uint32_t i = 0; i < n; ++i) {
      bufs[i]->port = tag;
      *xsk_ring_prod__fill_addr(&x.fq, idx + i) = pool->frame_addr(bufs[i]);
    }
    xsk_ring_prod__submit(&x.fq, n);
    free -= n;
  }
}

// Copy mode transmits from the sendto() call, at most a batch of descriptors per call (the
// kernel answers EAGAIN when it stopped at its batch limit with more queued): call again until
// the ring is drained or the kernel says something else (ring of the device full: EBUSY/ENOBUFS,
// retried on the next burst).
void AfXdpPort::Impl::kick_tx(Xsk& x) noexcept {
  for (uint32_t i = 0; i < kMaxKicks; ++i) {
    if (sendto(x.fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0 || errno != EAGAIN) return;
  }
}

void AfXdpPort::Impl::reclaim(Xsk& x) noexcept {
  uint32_t idx;
  rte_mbuf* bufs[kRingBatch];
  for (;;) {
    uint32_t n = xsk_ring_cons__peek(&x.cq, kRingBatch, &idx);
    if (n == 0) return;
    for (uint32_t i = 0; i < n; ++i) {
      rte_mbuf* m = pool->mbuf_of(*xsk_ring_cons__comp_addr(&x.cq, idx + i));
      m->port = RTE_MBUF_PORT_INVALID;  // no longer lent
      bufs[i] = m;
    }
    xsk_ring_cons__release(&x.cq, n);
    rte_pktmbuf_free_bulk(bufs, n);
  }
}

Result<void> AfXdpPort::start() {
  Impl& im = *impl_;
  if (im.started) return {};
  if (im.map_fd < 0) {
    return fail("port {}: no XSKMAP: the steering program's xsks_map must be given first", name());
  }
  if (auto r = im.open_sockets(); !r) return fail("port {}: {}", name(), r.error().message);
  for (uint16_t i = 0; i < im.nqueues; ++i) {
    Queue& q = im.queues[i];
    int fd = q.xsk ? q.xsk->fd : q.pmd.fd;
    uint32_t key = q.device_queue;
    if (int rc = bpf_map_update_elem(im.map_fd, &key, &fd, BPF_ANY); rc != 0) {
      im.started = true;
      stop();
      return fail("port {}: cannot insert the socket of queue {} into the XSKMAP: {}", name(),
                  q.device_queue, errno_text(rc));
    }
    if (q.pmd.dev.valid()) {
      if (auto r = q.pmd.dev.start(); !r) {
        im.started = true;
        stop();
        return fail("port {}: DPDK-owned queue {}: {}", name(), q.device_queue, r.error().message);
      }
    }
  }
  im.started = true;
  size_t zc = 0, own = 0;
  for (uint16_t i = 0; i < im.nqueues; ++i) {
    if (im.queues[i].xsk) {
      ++own;
      zc += im.queues[i].xsk->zero_copy;
    }
  }
  log::get("io")->info("port {}: started, {} socket(s) in {} mode{}", name(), own,
                       zc == own && own ? "zero-copy" : "copy",
                       im.opt.busy_poll ? ", busy polling" : "");
  return {};
}

void AfXdpPort::stop() noexcept {
  Impl& im = *impl_;
  if (!im.started) return;
  for (uint16_t i = 0; i < im.nqueues; ++i) {
    Queue& q = im.queues[i];
    uint32_t key = q.device_queue;
    if (im.map_fd >= 0) bpf_map_delete_elem(im.map_fd, &key);
    q.pmd.dev.stop();
    rx_counter(i).sleeping.store(false, std::memory_order_relaxed);
  }
  im.close_sockets();
  im.started = false;
}

uint16_t AfXdpPort::rx_queue_count() const noexcept {
  return impl_->nqueues;
}

uint16_t AfXdpPort::tx_queue_count() const noexcept {
  return impl_->nqueues;
}

uint16_t AfXdpPort::rx_burst(uint16_t qi, rte_mbuf** pkts, uint16_t n) noexcept {
  Impl& im = *impl_;
  Queue& q = im.queues[qi];
  RxQueueCounters& c = rx_counter(qi);
  uint16_t got;
  if (Xsk* x = q.xsk.get()) {
    uint32_t idx;
    // Room for the last frame's further descriptors, so that a window of n ends in whole
    // frames when there are n of them. A frame longer than the window (more than n + 16
    // buffers: only past the loader's MTU limit, set on the interface by hand) waits for a
    // call with a larger n; the adapters ask for 32, which covers 48 buffers, more than the
    // 41 of a 64 KiB frame in 2048-byte chunks.
    const uint32_t window = x->multi_buffer ? n + AfXdpPort::kMaxBuffersPerFrame : n;
    const uint32_t descs = xsk_ring_cons__peek(&x->rx, window, &idx);
    if (descs == 0) {
      im.refill(*x);  // tops up after a pool shortage even while no frame arrives
      // Busy polling drives the driver from here; in zero-copy mode a driver that ran out of
      // fill entries waits for this wake-up. Copy mode (veth, generic XDP) never needs it.
      if (im.opt.busy_poll || xsk_ring_prod__needs_wakeup(&x->fq)) {
        recvfrom(x->fd, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
      }
      return 0;
    }
    const PacketPool& pool = *im.pool;
    got = 0;
    uint32_t used = 0;  // descriptors of whole frames
    rte_mbuf* tail = nullptr;
    for (uint32_t i = 0; i < descs && got < n; ++i) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&x->rx, idx + i);
      rte_mbuf* m = pool.mbuf_of(d->addr);
      m->data_off = pool.data_off_of(d->addr);
      m->data_len = static_cast<uint16_t>(d->len);
      if (tail == nullptr) [[likely]] {
        m->pkt_len = d->len;
        pkts[got] = m;
      } else {  // a further buffer of the frame at pkts[got] (free mbufs have next null)
        tail->next = m;
        pkts[got]->nb_segs++;
        pkts[got]->pkt_len += d->len;
      }
      if (d->options & kXdpPktContd) [[unlikely]] {
        tail = m;
        continue;
      }
      tail = nullptr;
      ++got;
      used = i + 1;
    }
    if (tail != nullptr) {  // a frame whose last descriptor is not here yet: read it again later
      for (rte_mbuf* m = pkts[got]; m != nullptr;) {
        rte_mbuf* next = m->next;
        m->next = nullptr;
        m->nb_segs = 1;
        m = next;
      }
    }
    xsk_ring_cons__cancel(&x->rx, descs - used);
    xsk_ring_cons__release(&x->rx, used);
    im.refill(*x);
    if (got == 0) return 0;
  } else if (q.pmd.dev.valid()) {
    got = rte_eth_rx_burst(q.pmd.dev.port(), 0, pkts, n);
    if (got == 0) return 0;
  } else {
    return 0;  // stopped
  }
  // Metadata, or one software parse; malformed frames are dropped here and counted.
  uint64_t bytes;
  const uint16_t kept = classify_burst(pkts, got, im.opt.classify, true, c.drops, bytes);
  c.packets.add(kept);
  c.bytes.add(bytes);
  return kept;
}

uint16_t AfXdpPort::tx_burst(uint16_t qi, rte_mbuf** pkts, uint16_t n) noexcept {
  Impl& im = *impl_;
  Queue& q = im.queues[qi];
  TxQueueCounters& c = tx_counter(qi);
  Xsk* x = q.xsk.get();
  if (!x) {
    if (!q.pmd.dev.valid()) return 0;
    uint64_t bytes = 0;  // read before the PMD may free what it takes
    for (uint16_t i = 0; i < n; ++i)
      bytes += pkts[i]->pkt_len;
    uint16_t sent = rte_eth_tx_burst(q.pmd.dev.port(), 0, pkts, n);
    for (uint16_t i = sent; i < n; ++i)
      bytes -= pkts[i]->pkt_len;
    c.packets.add(sent);
    c.bytes.add(bytes);
    c.refused.add(n - sent);
    return sent;
  }
  im.reclaim(*x);
  const PacketPool& pool = *im.pool;
  // A packet goes out as it is when its buffers belong to the pool and nobody else holds them,
  // a descriptor each; otherwise (shared, indirect, foreign pool, a longer chain) it is copied
  // once into fresh buffers, as few as hold it. Those buffers are taken first, so a shortage
  // only shortens the burst. Without multi-buffer a packet is one descriptor.
  const uint16_t max_descs = x->multi_buffer ? AfXdpPort::kMaxBuffersPerFrame : 1;
  const uint32_t max_copy = pool.data_room() - RTE_PKTMBUF_HEADROOM;
  uint32_t free = xsk_prod_nb_free(&x->tx, n);
  rte_mbuf* fresh[kRingBatch];
  uint16_t copies = 0;  // fresh buffers needed
  uint32_t descs = 0;
  uint16_t limit = 0;
  for (; limit < n; ++limit) {
    const rte_mbuf* m = pkts[limit];
    uint32_t need = as_is_descs(pool, m, max_descs);
    const bool copy = need == 0;
    if (copy) need = std::max<uint32_t>(1, (m->pkt_len + max_copy - 1) / max_copy);
    if (descs + need > free && (free = xsk_prod_nb_free(&x->tx, descs + need)) < descs + need)
      break;
    if (copy && (need > max_descs || copies + need > kRingBatch)) break;
    descs += need;
    if (copy) copies = static_cast<uint16_t>(copies + need);
  }
  if (copies && rte_pktmbuf_alloc_bulk(pool.mempool(), fresh, copies) != 0) {
    copies = 0;
    descs = 0;
    for (limit = 0; limit < n; ++limit) {
      const uint16_t need = as_is_descs(pool, pkts[limit], max_descs);
      if (need == 0 || descs + need > free) break;
      descs += need;
    }
  }
  uint32_t idx = 0;
  if (descs) xsk_ring_prod__reserve(&x->tx, descs, &idx);
  uint64_t bytes = 0;
  uint16_t used = 0;
  for (uint16_t i = 0; i < limit; ++i) {
    rte_mbuf* m = pkts[i];
    const uint32_t len = m->pkt_len;
    bytes += len;
    if (as_is_descs(pool, m, max_descs) == 0) {
      rte_mbuf* first = fresh[used];
      rte_mbuf* prev = nullptr;
      uint32_t off = 0;
      do {  // at least one buffer, as counted above
        rte_mbuf* f = fresh[used++];
        const uint32_t part = std::min(max_copy, len - off);
        auto* to = rte_pktmbuf_mtod(f, uint8_t*);
        const void* from = part ? rte_pktmbuf_read(m, off, part, to) : to;
        if (from != to) std::memcpy(to, from, part);
        f->data_len = static_cast<uint16_t>(part);
        if (prev) prev->next = f;
        prev = f;
        off += part;
      } while (off < len);
      rte_pktmbuf_free(m);
      m = first;
    }
    // One descriptor a buffer; the chain is undone, as each buffer comes back on its own
    // through the completion ring.
    while (m != nullptr) {
      rte_mbuf* next = m->next;
      xdp_desc* d = xsk_ring_prod__tx_desc(&x->tx, idx++);
      d->addr = pool.data_addr(m);
      d->len = m->data_len;
      d->options = next != nullptr ? kXdpPktContd : 0;
      m->port = im.tag;  // lent to the kernel until its completion comes back
      if (next != nullptr) [[unlikely]] {
        m->next = nullptr;
        m->nb_segs = 1;
      }
      m = next;
    }
  }
  if (descs) xsk_ring_prod__submit(&x->tx, descs);
  if (xsk_ring_prod__needs_wakeup(&x->tx) && xsk_prod_nb_free(&x->tx, x->tx.size) < x->tx.size) {
    im.kick_tx(*x);
  }
  c.packets.add(limit);
  c.bytes.add(bytes);
  c.copies.add(copies);
  c.refused.add(n - limit);
  return limit;
}

LinkState AfXdpPort::link_state() const noexcept {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, impl_->ifname.c_str(), IFNAMSIZ - 1);
  if (ioctl(impl_->ctl, SIOCGIFFLAGS, &ifr) != 0) {
    // An interface that no longer exists carries no traffic: its port is down.
    return errno == ENODEV ? LinkState::Down : LinkState::Unknown;
  }
  return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING) ? LinkState::Up
                                                                   : LinkState::Down;
}

MacAddress AfXdpPort::mac() const noexcept {
  return impl_->mac;
}

int AfXdpPort::arm_wakeup(uint16_t qi) noexcept {
  Impl& im = *impl_;
  Queue& q = im.queues[qi];
  int fd = -1;
  if (Xsk* x = q.xsk.get()) {
    im.refill(*x);
    // An empty fill ring would let frames be dropped without ever waking us.
    if (xsk_prod_nb_free(&x->fq, x->fq.size) == x->fq.size) return -1;
    fd = x->fd;
  } else {
    fd = q.pmd.fd;
  }
  if (fd < 0) return -1;
  RxQueueCounters& c = rx_counter(qi);
  c.sleeps.add();
  c.sleeping.store(true, std::memory_order_relaxed);
  return fd;
}

void AfXdpPort::disarm_wakeup(uint16_t qi) noexcept {
  rx_counter(qi).sleeping.store(false, std::memory_order_relaxed);
}

void AfXdpPort::set_flow_hash(bool needed, const FlowHashRewrite* rewrite) noexcept {
  impl_->opt.classify.hash = needed;
  impl_->opt.classify.rewrite = rewrite;
}

void AfXdpPort::set_vlans(const VlanDemux* demux) noexcept {
  Port::set_vlans(demux);
  __atomic_store_n(&impl_->opt.classify.vlans, demux, __ATOMIC_RELEASE);
}

PortHardware AfXdpPort::hardware() const {
  return interface_hardware(impl_->ifname);
}

uint32_t AfXdpPort::device_mtu() const {
  return interface_mtu(impl_->ifname);
}

PortStatus AfXdpPort::status() const {
  const Impl& im = *impl_;
  PortStatus s = base_status();
  s.device = im.ifname;
  uint64_t ring_full = 0, fill_empty = 0, too_big = 0;
  for (uint16_t i = 0; i < im.nqueues && i < s.queues.size(); ++i) {
    const Queue& q = im.queues[i];
    QueueStatus& qs = s.queues[i];
    qs.device_queue = q.device_queue;
    qs.owner = q.owner;
    qs.busy_poll = im.opt.busy_poll;
    if (q.xsk) {
      qs.served_by = fmt::format("xsk fd {}", q.xsk->fd);
      qs.copy = q.xsk->zero_copy ? CopyMode::ZeroCopy : CopyMode::Copy;
      qs.can_sleep = true;
      // Free-running ring indices, shared with the kernel and readable from any thread: every
      // buffer put in the fill ring comes back through the rx ring, every transmitted one
      // through the completion ring.
      auto idx = [](const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); };
      const Xsk& x = *q.xsk;
      qs.kernel_buffers = static_cast<uint32_t>(idx(x.fq.producer) - idx(x.rx.consumer)) +
                          static_cast<uint32_t>(idx(x.tx.producer) - idx(x.cq.consumer));
      xdp_statistics st{};
      socklen_t len = sizeof(st);
      if (getsockopt(q.xsk->fd, SOL_XDP, XDP_STATISTICS, &st, &len) == 0) {
        ring_full += st.rx_ring_full;
        fill_empty += st.rx_fill_ring_empty_descs;
        too_big += st.rx_dropped > st.rx_fill_ring_empty_descs
                       ? st.rx_dropped - st.rx_fill_ring_empty_descs
                       : 0;
        auto name = [&](const char* what) { return fmt::format("q{}.{}", q.device_queue, what); };
        s.device_stats.emplace_back(name("rx_dropped"), st.rx_dropped);
        s.device_stats.emplace_back(name("rx_invalid_descs"), st.rx_invalid_descs);
        s.device_stats.emplace_back(name("tx_invalid_descs"), st.tx_invalid_descs);
        s.device_stats.emplace_back(name("rx_ring_full"), st.rx_ring_full);
        s.device_stats.emplace_back(name("rx_fill_ring_empty_descs"), st.rx_fill_ring_empty_descs);
        s.device_stats.emplace_back(name("tx_ring_empty_descs"), st.tx_ring_empty_descs);
      }
    } else if (q.pmd.dev.valid()) {
      qs.served_by = q.pmd.dev.name();
      // net_af_xdp (22.11) places frames straight into pool mbufs; whether the kernel copied
      // them first is its socket's business, which the PMD does not report.
      qs.copy = CopyMode::ZeroCopy;
      qs.can_sleep = q.pmd.fd >= 0;
      for (auto& [r, v] : q.pmd.dev.drops())
        s.device_drops.emplace_back(r, v);
      for (auto& [k, v] : q.pmd.dev.xstats())
        s.device_stats.emplace_back(q.pmd.dev.name() + "." + k, v);
    }
  }
  if (ring_full) s.device_drops.emplace_back(DropReason::XSK_RING_FULL, ring_full);
  if (fill_empty) s.device_drops.emplace_back(DropReason::NOMBUF, fill_empty);
  if (too_big) s.device_drops.emplace_back(DropReason::FRAME_TOO_BIG, too_big);
  return s;
}

}  // namespace vecflow
