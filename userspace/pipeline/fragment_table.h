// What the conntrack stage made of the first fragment of an IPv4 datagram, for its later
// fragments.
//
// Only a first fragment carries the ports a connection is looked up by; the later ones carry
// the IP header alone. vecflow does not reassemble: as VPP's virtual reassembly, it remembers
// each first fragment's outcome (its conntrack mark, the addresses NAT gave it) by the
// datagram's identity (source, destination, protocol, IP id) and gives the later fragments
// the same. For that they must reach the owner of the first fragment's flow bucket: the
// receive-side hash (pipeline/fragment_hash.h) gives a later fragment its first fragment's
// flow hash, and this table is laid out by flow hash class like the connection table
// (pipeline/conntrack_table.h): a bucket holds the datagrams of one class, so only the worker
// holding that flow bucket reads or writes it, without a lock.
//
// Bounded: 4-way buckets; a new datagram takes a free or expired way, else the one that
// expires first. A datagram whose entry is gone (expired, replaced) is not known to its later
// fragments: the conntrack stage tracks them by their addresses, and with NAT drops those it
// would have translated (nat_fragment).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "core/packet.h"

namespace vecflow {

class FragmentTable {
 public:
  // A datagram as received (addresses in network order). No default values: the conntrack
  // stage keeps one on its per-packet path and fills it only for a first fragment.
  struct Datagram {
    uint32_t src;
    uint32_t dst;
    uint16_t id;
    uint8_t proto;
  };
  // What its first fragment became: the addresses it left with, and its mark.
  struct Outcome {
    uint32_t src = 0;
    uint32_t dst = 0;
    CtMark mark = CtMark::None;
  };

  // 1 << kBucketBits buckets: at least one per flow hash class (ConnTable::kClasses).
  static constexpr unsigned kBucketBits = 12;
  static constexpr unsigned kWays = 4;

  FragmentTable();

  // ---- the owner of `hash`'s flow bucket ----
  // Records `d`'s outcome until tick `expires` (ConnTable::tick).
  void remember(uint32_t hash, const Datagram& d, const Outcome& o, uint32_t now,
                uint32_t expires) noexcept;
  // `d`'s outcome while it lives, or nullptr.
  const Outcome* find(uint32_t hash, const Datagram& d, uint32_t now) const noexcept;

  static constexpr size_t kCapacity = size_t{kWays} << kBucketBits;

 private:
  struct Entry {
    Datagram datagram;
    Outcome outcome;
    uint32_t expires = 0;  // tick; 0 with an empty way
    bool used = false;
  };
  struct Bucket {
    std::array<Entry, kWays> ways;
  };
  static bool same(const Datagram& a, const Datagram& b) noexcept {
    return a.src == b.src && a.dst == b.dst && a.id == b.id && a.proto == b.proto;
  }
  static bool live(const Entry& e, uint32_t now) noexcept {
    return e.used && static_cast<int32_t>(e.expires - now) > 0;
  }
  Bucket& bucket(uint32_t hash) const noexcept {
    return buckets_[hash & ((1u << kBucketBits) - 1)];
  }

  std::unique_ptr<Bucket[]> buckets_;
};

}  // namespace vecflow
