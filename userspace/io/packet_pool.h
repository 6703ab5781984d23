// The appliance's packet buffers: one DPDK mempool of rte_mbufs that every port receives into,
// laid out so that the same memory can be registered as an AF_XDP UMEM.
//
// Each mempool object is [mempool header 64][rte_mbuf 128][data room ...], and the objects sit
// back to back in one page-aligned, virtually contiguous memzone, the UMEM. Two layouts:
//
//   Aligned  objects exactly `frame_size` (2048 or 4096) apart: object i is chunk i of a UMEM
//            in aligned-chunk mode, a chunk never straddles a 4 KiB page (which zero-copy
//            drivers require of memory on 4 KiB pages), and translating between an mbuf and
//            its UMEM address is a mask.
//   Spread   objects frame_size + 64 bytes apart (a UMEM in unaligned-chunk mode). A
//            power-of-two stride puts the same field of every mbuf in the same few cache sets
//            (2 of the 64 sets of a 48 KiB L1 at 2048 bytes), so a worker going over a vector
//            of packets misses L1 on every mbuf: DPDK's own pools pad objects for this reason.
//            An odd number of cache lines between objects spreads them over every set. The
//            fill, rx, tx and completion addresses carry the object's start in their low bits
//            and the data offset in the top 16 (XSK_UNALIGNED_BUF_OFFSET_SHIFT), so the
//            translations stay a mask and a shift. Objects never straddle a page of the
//            memory (DPDK leaves the rest of a page empty): safe for devices that DMA.
//
// The receive headroom is 192 bytes either way (the kernel writes frames into the data room,
// never over the rte_mbuf). Translating an address is what lets a frame received over AF_XDP
// leave through a DPDK port, and an mbuf received by a PMD leave through AF_XDP, without a copy.
// port_factory.h says which layout an appliance gets.
//
// DPDK's net_af_xdp PMD (22.11) registers its own UMEM over a mempool from the first memory
// chunk's page and `populated_size * object size`, which the Aligned layout satisfies (no page
// leaves a gap), so DPDK-owned AF_XDP queues use the same buffers.
//
// Lifetime: create once after EAL, destroy after every port that uses it is gone.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>

#include <rte_mbuf.h>

#include "core/error.h"

struct rte_mempool;
struct rte_memzone;

namespace vecflow {

enum class PoolLayout : uint8_t { Aligned, Spread };

struct PacketPoolOptions {
  std::string name = "vecflow_pkts";
  uint32_t mbufs = 16384;      // dpdk.mbufs; Aligned rounds it up to fill whole pages
  uint32_t cache = 256;        // dpdk.mbuf_cache: per-lcore cache of free buffers
  uint32_t frame_size = 2048;  // 2048 or 4096: the buffer size, AF_XDP chunk size when Aligned
  PoolLayout layout = PoolLayout::Aligned;
  int socket = -1;  // NUMA socket, -1 = any
};

class PacketPool {
 public:
  // Bytes in front of the rte_mbuf inside each object (the mempool object header).
  static constexpr uint32_t kHeaderSize = 64;
  // Bytes from the start of an object to the start of its mbuf's buffer (buf_addr): the
  // headroom AF_XDP must leave so the kernel never writes over the mbuf.
  static constexpr uint32_t kBufferOffset = kHeaderSize + sizeof(rte_mbuf);
  // What the Spread layout adds to frame_size between objects: one cache line, so that the
  // stride is an odd number of lines.
  static constexpr uint32_t kSpreadPad = 64;
  // XSK_UNALIGNED_BUF_OFFSET_SHIFT and XSK_UNALIGNED_BUF_ADDR_MASK of <linux/if_xdp.h> (the
  // AF_XDP port checks them), spelled here so this header does not pull in kernel headers.
  static constexpr unsigned kOffsetShift = 48;
  static constexpr uint64_t kAddrMask = (uint64_t{1} << kOffsetShift) - 1;

  static Result<std::unique_ptr<PacketPool>> create(const PacketPoolOptions& options);
  ~PacketPool();
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  rte_mempool* mempool() const noexcept { return mp_; }
  uint32_t count() const noexcept { return count_; }
  PoolLayout layout() const noexcept { return layout_; }
  // Bytes from one object to the next: the UMEM chunk size (frame_size + kSpreadPad when
  // Spread). The UMEM must be registered with XDP_UMEM_UNALIGNED_CHUNK_FLAG when Spread.
  uint32_t chunk_size() const noexcept { return stride_; }
  // Data room of each mbuf (RTE_PKTMBUF_HEADROOM included), as rte_pktmbuf_data_room_size().
  uint16_t data_room() const noexcept { return static_cast<uint16_t>(stride_ - kBufferOffset); }

  // The memory to register as a UMEM: page aligned, every object inside.
  uint8_t* base() const noexcept { return base_; }
  uint64_t bytes() const noexcept { return bytes_; }

  // Buffers currently taken from the pool (handed to a ring, a socket, or in flight). Exact
  // when no lcore is inside an alloc or free (per-lcore caches are counted as free).
  uint32_t in_use() const noexcept;

  bool owns(const rte_mbuf* m) const noexcept { return m->pool == mp_; }
  // UMEM address of the frame holding `m` (its chunk's first byte): what a fill ring takes.
  uint64_t frame_addr(const rte_mbuf* m) const noexcept {
    return reinterpret_cast<uintptr_t>(m) - kHeaderSize - reinterpret_cast<uintptr_t>(base_);
  }
  // The address of m's first data byte in an AF_XDP descriptor (tx ring).
  uint64_t data_addr(const rte_mbuf* m) const noexcept {
    const uint64_t offset = kBufferOffset + m->data_off;
    return layout_ == PoolLayout::Spread ? frame_addr(m) | offset << kOffsetShift
                                         : frame_addr(m) + offset;
  }
  // The mbuf of a descriptor address (rx, completion) or a fill address. Aligned: any byte of
  // the chunk; Spread: the chunk's start with an offset in the top bits, as the kernel and
  // data_addr() write them (DPDK's net_af_xdp writes the same in its unaligned mode, which
  // it uses for every pool).
  rte_mbuf* mbuf_of(uint64_t addr) const noexcept {
    addr &= kAddrMask;
    if (layout_ == PoolLayout::Aligned) addr &= ~uint64_t{stride_ - 1};
    return reinterpret_cast<rte_mbuf*>(base_ + addr + kHeaderSize);
  }
  // Whether a descriptor or fill address points into the UMEM.
  bool contains(uint64_t addr) const noexcept { return (addr & kAddrMask) < bytes_; }
  // Offset of a received descriptor's data from its mbuf's buf_addr (what data_off must be).
  uint16_t data_off_of(uint64_t addr) const noexcept {
    const uint64_t offset =
        layout_ == PoolLayout::Spread ? addr >> kOffsetShift : addr & (stride_ - 1);
    return static_cast<uint16_t>(offset - kBufferOffset);
  }

  // ---- buffers lent to the kernel ----
  // An AF_XDP socket hands buffers to the kernel (fill ring, tx ring) and gets them back
  // (rx ring, completion ring). Some it may never return: those still in the fill ring when the
  // socket closes, those the kernel set aside after a full rx ring, those of an unfinished
  // transmission. To return every one at teardown without tracking each, a buffer lent to
  // the kernel carries its lender's tag in m->port (a value no port id reaches); the lender
  // overwrites it when the buffer comes back (rx: the port id; completion: cleared). After
  // the socket is closed, reclaim(tag) frees every buffer still carrying the tag.
  static constexpr uint16_t kLentTagBase = 0xF000;
  static constexpr uint16_t kLentTags = 0xFFFF - kLentTagBase;  // 0xFFFF is DPDK's "no port"
  // A tag for a new lender, or an error when 4095 lenders exist already. Control thread.
  Result<uint16_t> open_lender();
  // Frees every buffer still lent under `tag` and retires the tag; returns how many. Call
  // only once nothing can return buffers under this tag any more (its sockets are closed).
  uint32_t close_lender(uint16_t tag);

 private:
  PacketPool() = default;
  rte_mempool* mp_ = nullptr;
  const rte_memzone* mz_ = nullptr;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint32_t count_ = 0;
  uint32_t stride_ = 0;
  PoolLayout layout_ = PoolLayout::Aligned;
  std::bitset<kLentTags> lenders_;
};

}  // namespace vecflow
