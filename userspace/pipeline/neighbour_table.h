// Link-layer addresses of next hops, per (port, IP address): static entries from the appliance
// file and entries learned from the kernel's neighbour table (ARP and ND reach the kernel
// through XDP, so the kernel resolves, and vecflow follows it over netlink).
//
// Read per packet by the neighbour stage without a lock: the (port, IP) -> id hash is DPDK's
// lock-free-read rte_hash, and an entry's address is one 64-bit word stored atomically, so a
// reader sees the old or the new address, never half of one. Written by the control thread
// (writers are serialised by a mutex the data path never takes).
//
// Ids are stable for the table's life: route tables keep the ids of their next hops, and
// packets in flight between the route and the neighbour stage carry one in PacketMeta::nexthop.
// So entries are never deleted or reused; one the kernel forgets stays, unresolved. That bounds
// the table by the number of distinct (port, IP) pairs ever seen, which kCapacity caps.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rte_hash.h>
#include <rte_ring_elem.h>

#include "core/dpdk_util.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/net.h"

namespace vecflow {

class OffloadFeed;

// The hash key. Plain bytes, zero padded: IPv4 addresses use ip[0..3].
struct NeighbourKey {
  uint16_t port = 0;
  uint8_t version = 4;
  uint8_t pad = 0;
  uint8_t ip[16] = {};

  static NeighbourKey of(PortId port, const IpAddress& a) noexcept {
    NeighbourKey k;
    k.port = to_index(port);
    k.version = a.version;
    std::memcpy(k.ip, a.bytes.data(), a.version == 4 ? 4 : 16);
    return k;
  }
  IpAddress address() const noexcept {
    IpAddress a;
    a.version = version;
    std::memcpy(a.bytes.data(), ip, version == 4 ? 4 : 16);
    return a;
  }
};
static_assert(sizeof(NeighbourKey) == 20);

// A resolution request queued by the data path: an entry's id, or (for a destination the
// table does not know yet) kNotFound and the key.
struct NeighbourRequest {
  uint32_t id;
  NeighbourKey key;
};
static_assert(sizeof(NeighbourRequest) % 4 == 0);

// One next hop as the data path reads it.
struct alignas(32) NeighbourEntry {
  // The MAC address in the low 48 bits, in wire order (byte 0 of the address is the lowest
  // byte of the word on this little-endian target), and kResolved.
  static constexpr uint64_t kResolved = uint64_t(1) << 63;
  // Without kResolved: an address of the box itself on that port (KernelSync follows the
  // interfaces' addresses). Packets to it go to the kernel, whatever the unresolved policy:
  // no neighbour will ever answer for it.
  static constexpr uint64_t kLocal = uint64_t(1) << 62;
  std::atomic<uint64_t> word{0};
  // TSC of the last resolution request for this entry from the data path (rate limit).
  std::atomic<uint64_t> requested{0};
  // Set by the data path when it forwards through this entry; taken by the control thread to
  // ask the kernel to keep confirming neighbours vecflow uses (the kernel does not see the
  // traffic, so it would let them go stale).
  std::atomic<uint32_t> used{0};
};

// What the control plane shows (`vecflowctl neighbours`).
struct NeighbourInfo {
  uint32_t id = 0;
  PortId port{};
  IpAddress ip;
  std::optional<MacAddress> mac;  // empty: unresolved
  bool is_static = false;
  bool is_local = false;  // an address of the box (NeighbourEntry::kLocal)
};

class NeighbourTable {
 public:
  // Distinct (port, IP) pairs the table can hold. Each costs ~100 bytes (entry, hash key and
  // slot); 65536 covers a /16 of directly connected hosts, far above the kernel's own default
  // neighbour limit (gc_thresh3 = 1024 per family). When full, new neighbours are not tracked
  // and packets to them follow the `unresolved` policy.
  static constexpr uint32_t kCapacity = 65536;
  // Resolution requests the data path can queue before KernelSync drains them; more are
  // dropped (the entry is asked again after kResolveRetry).
  static constexpr uint32_t kRequestRing = 1024;
  static constexpr uint32_t kNotFound = 0xffffffff;

  static Result<std::unique_ptr<NeighbourTable>> create(uint32_t capacity = kCapacity);

  // ---- data path (any worker lcore, no lock) ----

  // rte_hash_crc reads a key eight bytes at a time: keys reach rte_hash from 8-byte aligned
  // storage (a NeighbourKey alone is 2-byte aligned, and one in an array of them every 20 bytes).
  struct alignas(8) AlignedKey {
    NeighbourKey key;
  };
  // Bytes between keys in caller storage that keeps every key 8-byte aligned (find_bulk).
  static constexpr size_t kKeyStride = (sizeof(NeighbourKey) + 7) & ~size_t{7};

  // The id of (port, ip), or kNotFound.
  uint32_t find(const NeighbourKey& key) const noexcept {
    const AlignedKey k{key};
    int pos = rte_hash_lookup(hash_.get(), &k.key);
    return pos < 0 ? kNotFound : static_cast<uint32_t>(pos);
  }
  // The ids of up to kMaxBulk keys in one call (rte_hash's bulk lookup overlaps the keys'
  // memory accesses): ids[i] is the id of *keys[i], or kNotFound. Each key 8-byte aligned
  // (kKeyStride apart in an aligned buffer).
  static constexpr unsigned kMaxBulk = RTE_HASH_LOOKUP_BULK_MAX;
  void find_bulk(const NeighbourKey** keys, unsigned n, uint32_t* ids) const noexcept {
    int32_t pos[kMaxBulk];
    if (rte_hash_lookup_bulk(hash_.get(), reinterpret_cast<const void**>(keys), n, pos) != 0) {
      for (unsigned i = 0; i < n; ++i)
        ids[i] = find(*keys[i]);
      return;
    }
    for (unsigned i = 0; i < n; ++i)
      ids[i] = pos[i] < 0 ? kNotFound : static_cast<uint32_t>(pos[i]);
  }
  NeighbourEntry& entry(uint32_t id) noexcept { return entries_[id]; }

  // Queues a request that the kernel resolve entry `id` (KernelSync sends it), at most once
  // per `retry_tsc` cycles. Racing lcores may both queue one; KernelSync sends it once.
  void request_resolution(uint32_t id, uint64_t now_tsc, uint64_t retry_tsc) noexcept {
    NeighbourEntry& e = entries_[id];
    uint64_t last = e.requested.load(std::memory_order_relaxed);
    if (last != 0 && now_tsc - last < retry_tsc) return;
    e.requested.store(now_tsc, std::memory_order_relaxed);
    NeighbourRequest req{id, {}};
    rte_ring_mp_enqueue_elem(requests_.get(), &req, sizeof(req));
  }
  // The same for a destination without an entry (a connected host never seen); not rate
  // limited here (there is no entry to remember the time in), KernelSync deduplicates.
  void request_resolution(const NeighbourKey& key) noexcept {
    NeighbourRequest req{kNotFound, key};
    rte_ring_mp_enqueue_elem(requests_.get(), &req, sizeof(req));
  }

  // ---- control thread ----

  // The id of (port, ip), made (unresolved) if it does not exist. Fails when the table is full.
  Result<uint32_t> ensure(const NeighbourKey& key);
  // A static entry: its address never changes with the kernel's.
  Result<uint32_t> set_static(PortId port, const IpAddress& ip, const MacAddress& mac);
  // Ends a static entry (a reload removed it from the file): the entry stays, since ids are
  // never reused, but unresolved and no longer static, so the kernel's view takes over as it
  // does for any other next hop. Nothing to do when (port, ip) is not static.
  void clear_static(PortId port, const IpAddress& ip);
  // The kernel's view of (port, ip): an address, or none (incomplete, failed, deleted).
  // Ignored for static entries. Returns false when the table is full.
  bool learn(PortId port, const IpAddress& ip, std::optional<MacAddress> mac);
  // The box's own addresses, replacing the previous set: entries marked kLocal (made where
  // needed), which the kernel's view does not change; one no longer in the set becomes an
  // ordinary unresolved entry. Static entries are left alone. False when the table is full.
  bool set_local(const std::vector<NeighbourKey>& keys);
  // Takes up to `max` queued resolution requests, as keys.
  std::vector<NeighbourKey> take_requests(size_t max);
  // Keys of the entries the data path used since the last call (and clears their flags).
  std::vector<NeighbourKey> take_used();
  std::vector<NeighbourInfo> entries() const;
  size_t size() const;
  // Entries with a link-layer address now (a gauge: counted without copying the table).
  size_t resolved() const;
  // Flow offload's feed, told of every change of an entry's address (nullptr: none).
  void set_offload(OffloadFeed* feed) noexcept { offload_ = feed; }

 private:
  NeighbourTable() = default;
  Result<uint32_t> ensure_locked(const NeighbourKey& key);
  // Stores an entry's word (under mutex_), a change if it differs.
  void publish(uint32_t id, uint64_t word) noexcept;

  DpdkPtr<rte_hash> hash_;
  DpdkPtr<rte_ring> requests_;
  std::unique_ptr<NeighbourEntry[]> entries_;
  uint32_t capacity_ = 0;

  mutable std::mutex mutex_;  // writers only
  OffloadFeed* offload_ = nullptr;
  struct Slot {
    NeighbourKey key;
    bool is_static = false;
    bool is_local = false;
  };
  std::vector<Slot> slots_;    // by id; slots_[id] valid once the id exists
  std::vector<uint32_t> ids_;  // ids in creation order
};

// The MAC address of a resolved word, and the word of an address.
inline uint64_t neighbour_word(const MacAddress& mac) noexcept {
  uint64_t w = 0;
  std::memcpy(&w, mac.bytes.data(), 6);
  return w | NeighbourEntry::kResolved;
}
inline MacAddress neighbour_mac(uint64_t word) noexcept {
  MacAddress mac;
  std::memcpy(mac.bytes.data(), &word, 6);
  return mac;
}

}  // namespace vecflow
