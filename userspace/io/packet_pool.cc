#include "io/packet_pool.h"

#include <unistd.h>

#include <rte_errno.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>
#include <rte_memzone.h>

#include "core/log.h"

namespace vecflow {
Result<std::unique_ptr<PacketPool>> PacketPool::create(const PacketPoolOptions& o) {
  if (o.frame_size != 2048 && o.frame_size != 4096) {
    return fail("packet pool: frame size {} is not 2048 or 4096", o.frame_size);
  }
  if (o.name.size() >= RTE_MEMPOOL_NAMESIZE) {
    return fail("packet pool: name '{}' is longer than {} characters", o.name,
                RTE_MEMPOOL_NAMESIZE - 1);
  }
  const uint32_t page = static_cast<uint32_t>(getpagesize());
  // Whole pages of objects, so the UMEM length is a multiple of both the page and the chunk.
  const uint32_t per_page = page >= o.frame_size ? page / o.frame_size : 1;
  const uint32_t count = (o.mbufs + per_page - 1) / per_page * per_page;

  auto pool = std::unique_ptr<PacketPool>(new PacketPool());
  pool->count_ = count;
  pool->frame_size_ = o.frame_size;

  const uint32_t data_room = o.frame_size - kBufferOffset;
  const uint32_t elt_size = sizeof(rte_mbuf) + data_room;
  // NO_SPREAD: no padding between objects (DPDK would otherwise pad each object to spread them
  // over memory channels, which breaks the one-object-per-chunk layout).
  const unsigned flags = RTE_MEMPOOL_F_NO_SPREAD;
  rte_mempool_objsz sz{};
  if (rte_mempool_calc_obj_size(elt_size, flags, &sz) != o.frame_size ||
      sz.header_size != kHeaderSize) {
    return fail(
        "packet pool: this DPDK build lays out mempool objects as {}+{}+{} bytes, not {} with a "
        "{}-byte header (built with mempool debugging?)",
        sz.header_size, sz.elt_size, sz.trailer_size, o.frame_size, kHeaderSize);
  }

  // From here on `pool` owns what is made; its destructor frees the mempool, then its memory.
  pool->mp_ = rte_mempool_create_empty(o.name.c_str(), count, elt_size, o.cache,
                                       sizeof(rte_pktmbuf_pool_private), o.socket, flags);
  rte_mempool* mp = pool->mp_;
  if (!mp) {
    return fail("packet pool: cannot create mempool '{}' of {} buffers: {}", o.name, count,
                rte_strerror(rte_errno));
  }
  if (int rc = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr); rc != 0) {
    return fail("packet pool: mempool ops '{}': {}", rte_mbuf_best_mempool_ops(),
                rte_strerror(-rc));
  }
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = static_cast<uint16_t>(data_room);
  priv.mbuf_priv_size = 0;
  rte_pktmbuf_pool_init(mp, &priv);

  // One memzone: memzones are always virtually contiguous, which a UMEM must be. It is page
  // aligned; the pages themselves may be 4 KiB (--no-huge) or hugepages.
  const std::string mz_name = o.name + "_mem";
  const uint64_t bytes = uint64_t{count} * o.frame_size;
  pool->mz_ = rte_memzone_reserve_aligned(mz_name.c_str(), bytes, o.socket, 0, page);
  const rte_memzone* mz = pool->mz_;
  if (!mz) {
    return fail(
        "packet pool: cannot reserve {} MiB for {} buffers of {} bytes ({}): raise "
        "dpdk.memory_mb or lower dpdk.mbufs",
        bytes >> 20, count, o.frame_size, rte_strerror(rte_errno));
  }
  // populate_virt splits the zone where its IOVAs are not contiguous; every split falls on a
  // page boundary and frame_size divides the page, so object i stays at base + i*frame_size.
  const size_t pg = mz->hugepage_sz ? mz->hugepage_sz : page;
  int n = rte_mempool_populate_virt(mp, static_cast<char*>(mz->addr), bytes, pg, nullptr, nullptr);
  if (n < 0 || mp->populated_size != count) {
    return fail("packet pool: could place only {} of {} buffers in {} bytes{}", mp->populated_size,
                count, bytes, n < 0 ? ": " + std::string(rte_strerror(-n)) : "");
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  pool->base_ = static_cast<uint8_t*>(mz->addr);
  // The layout promise the AF_XDP code relies on: object i's mbuf at base + i*frame_size + 64.
  struct Check {
    const PacketPool* pool;
    uint32_t misplaced;
  } check{pool.get(), 0};
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool*, void* arg, void* obj, unsigned) {
        auto* c = static_cast<Check*>(arg);
        auto* m = static_cast<rte_mbuf*>(obj);
        uint64_t addr = c->pool->frame_addr(m);
        if (addr >= c->pool->bytes() || c->pool->mbuf_of(addr) != m) ++c->misplaced;
      },
      &check);
  if (check.misplaced != 0) {
    return fail("packet pool: DPDK placed {} buffers off the {}-byte grid the UMEM needs",
                check.misplaced, o.frame_size);
  }

  log::get("io")->info("packet pool '{}': {} buffers of {} bytes ({} MiB at {}), cache {}", o.name,
                       count, o.frame_size, bytes >> 20, static_cast<const void*>(pool->base_),
                       o.cache);
  return pool;
}

PacketPool::~PacketPool() {
  if (mp_) rte_mempool_free(mp_);
  if (mz_) rte_memzone_free(mz_);
}

Result<uint16_t> PacketPool::open_lender() {
  for (uint16_t i = 0; i < kLentTags; ++i) {
    if (!lenders_.test(i)) {
      lenders_.set(i);
      return static_cast<uint16_t>(kLentTagBase + i);
    }
  }
  return fail("packet pool: more than {} AF_XDP sockets", kLentTags);
}

uint32_t PacketPool::close_lender(uint16_t tag) {
  struct Scan {
    uint16_t tag;
    uint32_t freed;
  } scan{tag, 0};
  // Reads the header of every buffer, free or not: a free buffer never carries a live tag
  // (lenders clear it before freeing), so only buffers still lent under `tag` match.
  rte_mempool_obj_iter(
      mp_,
      [](rte_mempool*, void* arg, void* obj, unsigned) {
        auto* s = static_cast<Scan*>(arg);
        auto* m = static_cast<rte_mbuf*>(obj);
        if (m->port != s->tag) return;
        m->port = RTE_MBUF_PORT_INVALID;
        rte_pktmbuf_free(m);
        ++s->freed;
      },
      &scan);
  lenders_.reset(tag - kLentTagBase);
  return scan.freed;
}

uint32_t PacketPool::in_use() const noexcept {
  return rte_mempool_in_use_count(mp_);
}

}  // namespace vecflow
