#include "io/afxdp/pmd_queue.h"

#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <rte_mbuf.h>
#include <xdp/xsk.h>

#include "core/error.h"
#include "core/log.h"
#include "io/afxdp/xsk_fds.h"
#include "io/packet_pool.h"

namespace vecflow {
namespace {

// DPDK 22.11's net_af_xdp does not free the buffers its socket holds when it closes: those in
// its fill ring, and those the kernel delivered or completed that it has not read yet. They are
// pool buffers (its UMEM is the pool), so the port reads the socket's rings itself before the
// PMD closes and frees them after. Ring sizes: the PMD's fill ring has 4096 entries and its
// completion ring 2048 (ETH_AF_XDP_DFLT_NUM_DESCS in 22.11), rx and tx the descriptors we gave.
// A mapping is checked to be exactly that large (a ring twice the size would map twice as
// long), so a PMD with other sizes is detected and its buffers left alone rather than guessed.
constexpr uint32_t kPmdFillEntries = 4096;
constexpr uint32_t kPmdCompEntries = 2048;

class MappedRing {
 public:
  // Maps `entries` entries of `entry_size` bytes at `pgoff`; empty unless the ring has exactly
  // that many entries (whole pages of them: rings below a page cannot be told apart).
  MappedRing(int fd, uint64_t pgoff, const xdp_ring_offset& off, uint32_t entries,
             uint32_t entry_size, bool exact)
      : len_(off.desc + uint64_t{entries} * entry_size),
        off_(off),
        mask_(entries - 1),
        entry_size_(entry_size) {
    void* p = mmap(nullptr, len_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(pgoff));
    if (p == MAP_FAILED) return;
    if (exact) {
      // One page past the expected length must not map if the ring is that size.
      void* bigger =
          mmap(nullptr, len_ + 4096, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(pgoff));
      if (bigger != MAP_FAILED) {
        munmap(bigger, len_ + 4096);
        munmap(p, len_);
        return;
      }
    }
    base_ = static_cast<uint8_t*>(p);
  }
  ~MappedRing() {
    if (base_) munmap(base_, len_);
  }
  bool ok() const { return base_ != nullptr; }
  // The UMEM addresses in [consumer, producer): entries handed over and not yet taken back.
  void collect(std::vector<uint64_t>& out) const {
    uint32_t prod = *reinterpret_cast<const volatile uint32_t*>(base_ + off_.producer);
    uint32_t cons = *reinterpret_cast<const volatile uint32_t*>(base_ + off_.consumer);
    for (uint32_t i = cons; i != prod; ++i) {
      uint64_t a;
      std::memcpy(&a, base_ + off_.desc + uint64_t{i & mask_} * entry_size_, sizeof(a));
      out.push_back(xsk_umem__extract_addr(a));
    }
  }

 private:
  uint8_t* base_ = nullptr;
  uint64_t len_;
  xdp_ring_offset off_;
  uint32_t mask_;
  uint32_t entry_size_;
};

// The UMEM addresses of every buffer the PMD's socket `fd` still holds. Empty when the rings
// are not the sizes DPDK 22.11 uses.
std::vector<uint64_t> pmd_held_buffers(int fd, uint32_t descriptors) {
  std::vector<uint64_t> out;
  xdp_mmap_offsets off{};
  socklen_t len = sizeof(off);
  if (getsockopt(fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &len) != 0) return out;
  MappedRing fill(fd, XDP_UMEM_PGOFF_FILL_RING, off.fr, kPmdFillEntries, sizeof(uint64_t), true);
  MappedRing comp(fd, XDP_UMEM_PGOFF_COMPLETION_RING, off.cr, kPmdCompEntries, sizeof(uint64_t),
                  true);
  MappedRing rx(fd, XDP_PGOFF_RX_RING, off.rx, descriptors, sizeof(xdp_desc), false);
  MappedRing tx(fd, XDP_PGOFF_TX_RING, off.tx, descriptors, sizeof(xdp_desc), false);
  if (!fill.ok() || !comp.ok() || !rx.ok() || !tx.ok()) return out;
  fill.collect(out);
  comp.collect(out);
  rx.collect(out);
  tx.collect(out);
  return out;
}

// XDP attach flags that put a program back in the mode `ifindex` has it now.
uint32_t current_mode_flags(int ifindex) {
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  if (bpf_xdp_query(ifindex, 0, &q) != 0) return 0;
  return q.attach_mode == XDP_ATTACHED_SKB   ? XDP_FLAGS_SKB_MODE
         : q.attach_mode == XDP_ATTACHED_DRV ? XDP_FLAGS_DRV_MODE
                                             : 0;
}

// Detaches program `id` from `ifindex`, and only that one (XDP_FLAGS_REPLACE); -errno.
int detach_exactly(int ifindex, uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return -errno;
  bpf_xdp_attach_opts ao{};
  ao.sz = sizeof(ao);
  ao.old_prog_fd = fd;
  int rc = bpf_xdp_detach(ifindex, XDP_FLAGS_REPLACE | current_mode_flags(ifindex), &ao);
  ::close(fd);
  return rc;
}
}  // namespace

PmdQueues::~PmdQueues() {
  if (kept_prog_fd_ >= 0) ::close(kept_prog_fd_);
}

void PmdQueues::close(PmdQueue& q) noexcept {
  if (!q.dev.valid()) return;
  const int ifindex = opt_.ifindex;
  uint32_t before = 0;
  bpf_xdp_query_id(ifindex, 0, &before);
  const uint32_t mode = current_mode_flags(ifindex);
  std::vector<uint64_t> held = pmd_held_buffers(q.fd, opt_.descriptors);
  const std::string dev = q.dev.name();
  q.dev.close();
  q.fd = -1;
  for (uint64_t addr : held) {
    if (opt_.pool->contains(addr)) rte_pktmbuf_free(opt_.pool->mbuf_of(addr));
  }
  if (held.empty()) {
    log::get("io")->warn("port {}: could not read the rings of {}; its buffers stay taken",
                         opt_.port_name, dev);
  }
  uint32_t after = 0;
  bpf_xdp_query_id(ifindex, 0, &after);
  const bool foreign = std::find(pmd_progs_.begin(), pmd_progs_.end(), before) == pmd_progs_.end();
  if (before != 0 && after == 0 && foreign) {
    int fd = bpf_prog_get_fd_by_id(before);
    if (fd >= 0) {
      int rc = bpf_xdp_attach(ifindex, fd, mode | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
      ::close(fd);
      log::get("io")->info("port {}: re-attached XDP program {} that closing {} detached{}",
                           opt_.port_name, before, dev, rc == 0 ? "" : " (failed)");
    }
  }
}

Result<void> PmdQueues::open(PmdQueue& q) {
  const std::string& port_name = opt_.port_name;
  const std::string& ifname = opt_.ifname;
  const int ifindex = opt_.ifindex;
  uint32_t attached = 0;
  bpf_xdp_query_id(ifindex, 0, &attached);
  if (attached != 0 && attached != kept_prog_id_) {
    return fail(
        "port {}: interface {} has an XDP program attached (id {}) before its DPDK-owned queue {} "
        "was set up: DPDK's net_af_xdp must create its socket first (create the port before the "
        "steering program attaches)",
        port_name, ifname, attached, q.device_queue);
  }
  // DPDK's net_af_xdp attaches its program with each device and refuses an interface that has
  // one. The instance kept from the first device steps aside for the time the next device is
  // set up, and comes back after.
  const bool moved_aside = kept_prog_id_ != 0;
  auto put_back_kept = [&]() -> int {
    return !moved_aside ? 0
                        : bpf_xdp_attach(ifindex, kept_prog_fd_,
                                         kept_flags_ | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
  };
  if (moved_aside) {
    if (int rc = detach_exactly(ifindex, kept_prog_id_); rc != 0) {
      return fail("port {}: cannot move the steering program of {} aside for queue {}: {}",
                  port_name, ifname, q.device_queue, errno_text(rc));
    }
  }
  std::string dev = fmt::format("net_af_xdp_vf{}q{}", to_index(opt_.port), q.device_queue);
  std::string args = fmt::format("{},iface={},start_queue={},queue_count=1,busy_budget={}", dev,
                                 ifname, q.device_queue, opt_.busy_budget);
  if (!opt_.xdp_prog.empty()) args += ",xdp_prog=" + opt_.xdp_prog;
  const std::set<int> before = open_xsk_fds();
  auto d = EthDevice::probe(args);
  if (!d) {
    put_back_kept();
    return fail("port {}: DPDK-owned queue {}: {}", port_name, q.device_queue, d.error().message);
  }
  q.dev = std::move(*d);
  EthQueueConfig c;
  c.queues = 1;
  c.rx_descriptors = opt_.descriptors;
  c.tx_descriptors = c.rx_descriptors;
  c.pool = opt_.pool->mempool();
  c.rss = false;
  c.rx_interrupts = false;
  if (auto r = q.dev.configure(c); !r) {
    q.dev.close();
    put_back_kept();
    return fail("port {}: DPDK-owned queue {}: {}", port_name, q.device_queue, r.error().message);
  }
  // The program the PMD attached while creating its socket.
  uint32_t pmd_prog = 0;
  bpf_xdp_query_id(ifindex, 0, &pmd_prog);
  if (pmd_prog != 0) {
    pmd_progs_.push_back(pmd_prog);
    if (!opt_.xdp_prog.empty() && kept_prog_id_ == 0) {
      // The steering object's first instance stays, for the steering part to adopt.
      kept_prog_id_ = pmd_prog;
      kept_prog_fd_ = bpf_prog_get_fd_by_id(pmd_prog);
      kept_flags_ = current_mode_flags(ifindex);
    } else if (int rc = detach_exactly(ifindex, pmd_prog); rc != 0) {
      q.dev.close();
      put_back_kept();
      return fail("port {}: cannot detach the program net_af_xdp attached to {}: {}", port_name,
                  ifname, errno_text(rc));
    }
  }
  if (int rc = put_back_kept(); rc != 0) {
    q.dev.close();
    return fail("port {}: cannot put the steering program of {} back: {}", port_name, ifname,
                errno_text(rc));
  }
  // The device's one socket is the AF_XDP socket that appeared while it was set up.
  std::vector<int> fresh;
  for (int fd : open_xsk_fds()) {
    if (!before.count(fd)) fresh.push_back(fd);
  }
  if (fresh.size() != 1) {
    std::string name = q.dev.name();
    q.dev.close();
    return fail("port {}: expected one AF_XDP socket from {} for queue {}, found {}", port_name,
                name, q.device_queue, fresh.size());
  }
  q.fd = fresh.front();
  return {};
}

}  // namespace vecflow
