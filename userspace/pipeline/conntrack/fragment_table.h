// What the conntrack stage made of the first fragment of an IP datagram (IPv4 or IPv6), for
// its later fragments.
//
// Only a first fragment carries the ports a connection is looked up by; the later ones carry
// the IP header alone. vecflow does not reassemble: as VPP's virtual reassembly, it remembers
// each first fragment's outcome (its conntrack mark, the addresses NAT gave it) by the
// datagram's identity (source, destination, protocol, the identification of the IPv4 header
// or the IPv6 fragment header, and the conntrack zone: two tenants' VRFs may use the same
// addresses) and gives the later fragments the same. For that they
// must reach the owner of the first fragment's flow bucket: the receive-side hash
// (pipeline/conntrack/fragment_hash.h) gives a later fragment its first fragment's flow hash, and
// this table is laid out by flow hash class like the connection table
// (pipeline/conntrack/conntrack_table.h): a bucket holds the datagrams of one class, so only the
// worker holding that flow bucket reads or writes it, without a lock.
//
// Bounded: 4-way buckets; a new datagram takes a free or expired way, else the one that
// expires first. A datagram whose entry is gone (expired, replaced) is not known to its later
// fragments: the conntrack stage tracks them by their addresses, and with NAT drops those it
// would have translated (nat_fragment).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include <rte_mbuf.h>
#include <rte_mbuf_ptype.h>

#include "core/packet.h"

namespace vecflow {

class FragmentTable {
 public:
  // A datagram as received (addresses as they lie in the packet; an IPv4 address takes the
  // first 4 bytes, the rest are zero). No default values: the conntrack stage keeps one on
  // its per-packet path and fills it only for a first fragment.
  struct Datagram {
    std::array<uint8_t, 16> src;
    std::array<uint8_t, 16> dst;
    uint32_t id;    // IPv4: the header's 16 bits; IPv6: the fragment header's 32
    uint8_t proto;  // the upper-layer protocol
    uint8_t version;
    uint8_t zone;  // the conntrack zone it arrived in (its VRF's); fragment_of() gives 0
    bool operator==(const Datagram&) const = default;
  };
  // What its first fragment became: its mark, and for IPv4 the addresses it left with (NAT
  // translates IPv4 only).
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
  static bool live(const Entry& e, uint32_t now) noexcept {
    return e.used && static_cast<int32_t>(e.expires - now) > 0;
  }
  Bucket& bucket(uint32_t hash) const noexcept {
    return buckets_[hash & ((1u << kBucketBits) - 1)];
  }

  std::unique_ptr<Bucket[]> buckets_;
};

// Whether the parser marked `m` an IP fragment, first or later (core/packet.h).
inline bool is_fragment(const rte_mbuf* m) noexcept {
  return (m->packet_type & RTE_PTYPE_L4_MASK) == RTE_PTYPE_L4_FRAG;
}

// The datagram a fragment (is_fragment) belongs to, and whether it is a later fragment: one
// with a non-zero offset, which carries no L4 header.
struct FragmentOf {
  FragmentTable::Datagram datagram;
  bool later;
};
FragmentOf fragment_of(const rte_mbuf* m) noexcept;

}  // namespace vecflow
