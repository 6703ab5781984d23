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
  const bool spread = o.layout == PoolLayout::Spread;
  const uint32_t stride = o.frame_size + (spread ? kSpreadPad : 0);
  const uint32_t page = static_cast<uint32_t>(getpagesize());
  // Aligned: whole pages of objects, so the UMEM length is a multiple of the page and the chunk.
  const uint32_t per_small_page = page >= stride ? page / stride : 1;
  const uint32_t count =
      spread ? o.mbufs : (o.mbufs + per_small_page - 1) / per_small_page * per_small_page;

  auto pool = std::unique_ptr<PacketPool>(new PacketPool());
  pool->count_ = count;
  pool->stride_ = stride;
  pool->layout_ = o.layout;

  const uint32_t data_room = stride - kBufferOffset;
  const uint32_t elt_size = sizeof(rte_mbuf) + data_room;
  // NO_SPREAD: no padding between objects (DPDK would otherwise pad each object to spread them
  // over memory channels, which breaks the object-per-chunk layout; Spread pads by itself).
  const unsigned flags = RTE_MEMPOOL_F_NO_SPREAD;
  rte_mempool_objsz sz{};
  if (rte_mempool_calc_obj_size(elt_size, flags, &sz) != stride || sz.header_size != kHeaderSize) {
    return fail(
        "packet pool: this DPDK build lays out mempool objects as {}+{}+{} bytes, not {} with a "
        "{}-byte header (built with mempool debugging?)",
        sz.header_size, sz.elt_size, sz.trailer_size, stride, kHeaderSize);
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

  // One memzone: memzones are always virtually contiguous, which a UMEM must be. DPDK places
  // no object across a boundary of the memory's pages (2 MB with hugepages): when the stride
  // does not divide the page (Spread), each page keeps a tail of less than an object unused,
  // and the zone starts on a page so that the count of whole pages is what it holds.
  size_t mem_page = 0;  // the page the mempool's populate step bounds objects by
  if (rte_mempool_get_page_size(mp, &mem_page) != 0 || mem_page == 0) mem_page = page;
  const std::string mz_name = o.name + "_mem";
  uint64_t bytes = uint64_t{count} * stride;
  uint64_t align = page;
  if (spread && mem_page % stride != 0) {
    const uint64_t per_page = mem_page / stride;
    bytes = (count + per_page - 1) / per_page * mem_page;
    align = mem_page;
  }
  pool->mz_ = rte_memzone_reserve_aligned(mz_name.c_str(), bytes, o.socket, 0,
                                          static_cast<unsigned>(align));
  const rte_memzone* mz = pool->mz_;
  if (!mz) {
    return fail(
        "packet pool: cannot reserve {} MiB for {} buffers of {} bytes ({}): raise "
        "dpdk.memory_mb or lower dpdk.mbufs",
        bytes >> 20, count, stride, rte_strerror(rte_errno));
  }
  pool->bytes_ = bytes;
  // populate_virt splits the zone where its IOVAs are not contiguous; every split falls on a
  // page boundary, where no object lies anyway.
  const size_t pg = mz->hugepage_sz ? mz->hugepage_sz : page;
  int n = rte_mempool_populate_virt(mp, static_cast<char*>(mz->addr), bytes, pg, nullptr, nullptr);
  if (n < 0 || mp->populated_size != count) {
    return fail("packet pool: could place only {} of {} buffers in {} bytes{}", mp->populated_size,
                count, bytes, n < 0 ? ": " + std::string(rte_strerror(-n)) : "");
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  pool->base_ = static_cast<uint8_t*>(mz->addr);
  // The layout promise the AF_XDP code relies on: every mbuf inside the UMEM, at a chunk's
  // start plus the header (Aligned: on the frame_size grid), so that addresses lead back to it.
  struct Check {
    const PacketPool* pool;
    uint32_t misplaced;
  } check{pool.get(), 0};
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool*, void* arg, void* obj, unsigned) {
        auto* c = static_cast<Check*>(arg);
        auto* m = static_cast<rte_mbuf*>(obj);
        const uint64_t addr = c->pool->frame_addr(m);
        if (addr + c->pool->chunk_size() > c->pool->bytes() || c->pool->mbuf_of(addr) != m ||
            c->pool->mbuf_of(c->pool->data_addr(m)) != m)
          ++c->misplaced;
      },
      &check);
  if (check.misplaced != 0) {
    return fail("packet pool: DPDK placed {} buffers off the {}-byte grid the UMEM needs",
                check.misplaced, stride);
  }

  log::get("io")->info(
      "packet pool '{}': {} buffers of {} bytes ({} layout, {} MiB at {}), cache {}", o.name, count,
      stride, spread ? "spread" : "aligned", bytes >> 20, static_cast<const void*>(pool->base_),
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
