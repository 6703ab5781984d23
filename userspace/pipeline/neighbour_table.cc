#include "pipeline/neighbour_table.h"

#include <algorithm>
#include <bit>

#include <rte_errno.h>
#include <rte_hash_crc.h>

#include "core/offload_feed.h"

namespace vecflow {

static_assert(std::endian::native == std::endian::little,
              "NeighbourEntry::word keeps the MAC bytes in memory order");

Result<std::unique_ptr<NeighbourTable>> NeighbourTable::create(uint32_t capacity) {
  std::unique_ptr<NeighbourTable> t(new NeighbourTable());
  std::string name = dpdk_name("neigh");
  rte_hash_parameters p{};
  p.name = name.c_str();
  p.entries = capacity;
  p.key_len = sizeof(NeighbourKey);
  p.hash_func = rte_hash_crc;
  p.socket_id = SOCKET_ID_ANY;
  // Lock-free readers with one writer at a time; the extendable table guarantees that all
  // `capacity` keys fit whatever their hashes.
  p.extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF | RTE_HASH_EXTRA_FLAGS_EXT_TABLE;
  t->hash_.reset(rte_hash_create(&p));
  if (!t->hash_) return fail("cannot create the neighbour hash: {}", rte_strerror(rte_errno));
  std::string rname = dpdk_name("neighreq");
  t->requests_.reset(rte_ring_create_elem(rname.c_str(), sizeof(NeighbourRequest), kRequestRing,
                                          SOCKET_ID_ANY, RING_F_SC_DEQ));
  if (!t->requests_)
    return fail("cannot create the neighbour request ring: {}", rte_strerror(rte_errno));
  t->entries_.reset(new NeighbourEntry[capacity]);
  t->capacity_ = capacity;
  t->slots_.resize(capacity);
  return t;
}

Result<uint32_t> NeighbourTable::ensure_locked(const NeighbourKey& key) {
  const AlignedKey k{key};
  int pos = rte_hash_lookup(hash_.get(), &k.key);
  if (pos >= 0) return static_cast<uint32_t>(pos);
  // A new entry's word is 0 (unresolved) before its key is published, so a reader that finds
  // the key sees an unresolved entry until an address is stored.
  pos = rte_hash_add_key(hash_.get(), &k.key);
  if (pos < 0) {
    return fail("neighbour table full ({} entries): {} on port {} not tracked", capacity_,
                key.address().to_string(), key.port);
  }
  auto id = static_cast<uint32_t>(pos);
  slots_[id] = Slot{key, false, false};
  ids_.push_back(id);
  return id;
}

Result<uint32_t> NeighbourTable::ensure(const NeighbourKey& key) {
  std::lock_guard lock(mutex_);
  return ensure_locked(key);
}

Result<uint32_t> NeighbourTable::set_static(PortId port, const IpAddress& ip,
                                            const MacAddress& mac) {
  std::lock_guard lock(mutex_);
  auto id = ensure_locked(NeighbourKey::of(port, ip));
  if (!id) return id;
  slots_[*id].is_static = true;
  publish(*id, neighbour_word(mac));
  return id;
}

void NeighbourTable::clear_static(PortId port, const IpAddress& ip) {
  std::lock_guard lock(mutex_);
  const AlignedKey key{NeighbourKey::of(port, ip)};
  int pos = rte_hash_lookup(hash_.get(), &key.key);
  if (pos < 0 || !slots_[pos].is_static) return;
  slots_[pos].is_static = false;
  // Unresolved until the kernel answers: a packet to it now asks for resolution, and follows
  // the stage's `unresolved` policy meanwhile, rather than going to an address the file no
  // longer gives.
  publish(static_cast<uint32_t>(pos), 0);
}

bool NeighbourTable::learn(PortId port, const IpAddress& ip, std::optional<MacAddress> mac) {
  std::lock_guard lock(mutex_);
  NeighbourKey key = NeighbourKey::of(port, ip);
  uint32_t id;
  if (!mac) {
    // Forgetting an address needs no new entry.
    const AlignedKey k{key};
    int pos = rte_hash_lookup(hash_.get(), &k.key);
    if (pos < 0) return true;
    id = static_cast<uint32_t>(pos);
  } else {
    auto made = ensure_locked(key);
    if (!made) return false;
    id = *made;
  }
  if (slots_[id].is_static || slots_[id].is_local) return true;
  publish(id, mac ? neighbour_word(*mac) : 0);
  return true;
}

bool NeighbourTable::set_local(const std::vector<NeighbourKey>& keys) {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> local;
  bool all = true;
  for (const NeighbourKey& key : keys) {
    auto id = ensure_locked(key);
    if (!id) {
      all = false;
      continue;
    }
    if (!slots_[*id].is_static) local.push_back(*id);
  }
  std::sort(local.begin(), local.end());
  for (uint32_t id : ids_) {
    const bool now = std::binary_search(local.begin(), local.end(), id);
    if (now == slots_[id].is_local) continue;
    slots_[id].is_local = now;
    publish(id, now ? NeighbourEntry::kLocal : 0);
  }
  return all;
}

void NeighbourTable::publish(uint32_t id, uint64_t word) noexcept {
  // The kernel refreshes its neighbours' states all the time, mostly with the same address,
  // and learns new ones (the hosts' IPv6 neighbours): only a different word for an entry that
  // had an address is a change an offloaded flow may have been decided by (an unresolved next
  // hop's packets are held or handed to the kernel, never offloaded). It concerns the flows
  // of its IP version only.
  const uint64_t old = entries_[id].word.exchange(word, std::memory_order_acq_rel);
  if (old != word && old != 0 && offload_)
    offload_->changed(offload_change_of(slots_[id].key.version));
}

std::vector<NeighbourKey> NeighbourTable::take_requests(size_t max) {
  if (rte_ring_empty(requests_.get())) return {};  // the usual case: no heap, no lock
  std::vector<NeighbourRequest> reqs(max);
  unsigned n = rte_ring_sc_dequeue_burst_elem(
      requests_.get(), reqs.data(), sizeof(NeighbourRequest), static_cast<unsigned>(max), nullptr);
  std::vector<NeighbourKey> keys;
  keys.reserve(n);
  std::lock_guard lock(mutex_);
  for (unsigned i = 0; i < n; ++i)
    keys.push_back(reqs[i].id == kNotFound ? reqs[i].key : slots_[reqs[i].id].key);
  return keys;
}

std::vector<NeighbourKey> NeighbourTable::take_used() {
  std::lock_guard lock(mutex_);
  std::vector<NeighbourKey> used;
  for (uint32_t id : ids_) {
    if (entries_[id].used.load(std::memory_order_relaxed) != 0) {
      entries_[id].used.store(0, std::memory_order_relaxed);
      used.push_back(slots_[id].key);
    }
  }
  return used;
}

std::vector<NeighbourInfo> NeighbourTable::entries() const {
  std::lock_guard lock(mutex_);
  std::vector<NeighbourInfo> out;
  out.reserve(ids_.size());
  for (uint32_t id : ids_) {
    NeighbourInfo n;
    n.id = id;
    n.port = PortId{slots_[id].key.port};
    n.ip = slots_[id].key.address();
    n.is_static = slots_[id].is_static;
    n.is_local = slots_[id].is_local;
    uint64_t w = entries_[id].word.load(std::memory_order_acquire);
    if (w & NeighbourEntry::kResolved) n.mac = neighbour_mac(w);
    out.push_back(n);
  }
  return out;
}

size_t NeighbourTable::resolved() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (uint32_t id : ids_)
    n += (entries_[id].word.load(std::memory_order_acquire) & NeighbourEntry::kResolved) != 0;
  return n;
}

size_t NeighbourTable::size() const {
  std::lock_guard lock(mutex_);
  return ids_.size();
}

}  // namespace vecflow
