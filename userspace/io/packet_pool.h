// The appliance's packet buffers: one DPDK mempool of rte_mbufs that every port receives into,
// laid out so that the same memory can be registered as an AF_XDP UMEM.
//
// Layout. Each mempool object (its header, the rte_mbuf, the data room) is exactly
// `frame_size` bytes (2048 or 4096), and the objects sit back to back in one page-aligned,
// virtually contiguous memzone:
//
//   base + i*frame_size:  [mempool header 64][rte_mbuf 128][data room frame_size - 192 ...]
//
// so object i is UMEM chunk i of an AF_XDP UMEM registered at `base` in aligned-chunk mode
// (chunk size = frame_size, headroom = 192 bytes so that the kernel writes frames into the
// data room, never over the rte_mbuf). A chunk never straddles a page, which zero-copy drivers
// on 4 KiB pages require. Translating between an mbuf and its UMEM address is a mask and an
// add (frame_addr / mbuf_of), which is what lets a frame received over AF_XDP leave through a
// DPDK port, and an mbuf received by a PMD leave through AF_XDP, without a copy.
//
// DPDK's net_af_xdp PMD (22.11) registers its own UMEM over a mempool from the first memory
// chunk's page and `populated_size * object size`: this layout satisfies it too, so DPDK-owned
// AF_XDP queues use the same buffers.
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

struct PacketPoolOptions {
  std::string name = "vecflow_pkts";
  uint32_t mbufs = 16384;      // dpdk.mbufs; rounded up to fill whole pages
  uint32_t cache = 256;        // dpdk.mbuf_cache: per-lcore cache of free buffers
  uint32_t frame_size = 2048;  // 2048 or 4096: AF_XDP chunk size, and the mempool object size
  int socket = -1;             // NUMA socket, -1 = any
};

class PacketPool {
 public:
  // Bytes in front of the rte_mbuf inside each object (the mempool object header).
  static constexpr uint32_t kHeaderSize = 64;
  // Bytes from the start of an object to the start of its mbuf's buffer (buf_addr): the
  // headroom AF_XDP must leave so the kernel never writes over the mbuf.
  static constexpr uint32_t kBufferOffset = kHeaderSize + sizeof(rte_mbuf);

  static Result<std::unique_ptr<PacketPool>> create(const PacketPoolOptions& options);
  ~PacketPool();
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  rte_mempool* mempool() const noexcept { return mp_; }
  uint32_t count() const noexcept { return count_; }
  uint32_t frame_size() const noexcept { return frame_size_; }
  // Data room of each mbuf (RTE_PKTMBUF_HEADROOM included), as rte_pktmbuf_data_room_size().
  uint16_t data_room() const noexcept { return static_cast<uint16_t>(frame_size_ - kBufferOffset); }

  // The memory to register as a UMEM: page aligned, count() * frame_size() bytes.
  uint8_t* base() const noexcept { return base_; }
  uint64_t bytes() const noexcept { return uint64_t{count_} * frame_size_; }

  // Buffers currently taken from the pool (handed to a ring, a socket, or in flight). Exact
  // when no lcore is inside an alloc or free (per-lcore caches are counted as free).
  uint32_t in_use() const noexcept;

  bool owns(const rte_mbuf* m) const noexcept { return m->pool == mp_; }
  // UMEM address of the frame holding `m` (its chunk's first byte).
  uint64_t frame_addr(const rte_mbuf* m) const noexcept {
    return reinterpret_cast<uintptr_t>(m) - kHeaderSize - reinterpret_cast<uintptr_t>(base_);
  }
  // UMEM address of a byte inside the pool (a packet's first byte, for an AF_XDP descriptor).
  uint64_t umem_addr(const void* p) const noexcept {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(base_);
  }
  // The mbuf whose chunk holds UMEM address `addr` (any byte of the chunk).
  rte_mbuf* mbuf_of(uint64_t addr) const noexcept {
    return reinterpret_cast<rte_mbuf*>(base_ + (addr & ~uint64_t{frame_size_ - 1}) + kHeaderSize);
  }
  // Offset of UMEM address `addr` from its mbuf's buf_addr (what data_off must be).
  uint16_t data_off_of(uint64_t addr) const noexcept {
    return static_cast<uint16_t>((addr & (frame_size_ - 1)) - kBufferOffset);
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
  uint32_t count_ = 0;
  uint32_t frame_size_ = 0;
  std::bitset<kLentTags> lenders_;
};

}  // namespace vecflow
