#include "pipeline/fragment_table.h"

#include "pipeline/conntrack_table.h"

namespace vecflow {

static_assert((1u << FragmentTable::kBucketBits) >= ConnTable::kClasses,
              "a bucket must hold the datagrams of one flow hash class only");

FragmentTable::FragmentTable() : buckets_(new Bucket[size_t{1} << kBucketBits]()) {}

void FragmentTable::remember(uint32_t hash, const Datagram& d, const Outcome& o, uint32_t now,
                             uint32_t expires) noexcept {
  Bucket& b = bucket(hash);
  Entry* slot = nullptr;
  for (Entry& e : b.ways) {
    if (e.used && same(e.datagram, d)) {
      slot = &e;  // a first fragment sent again
      break;
    }
    if (!live(e, now)) {
      if (slot == nullptr || live(*slot, now)) slot = &e;
    } else if (slot == nullptr ||
               (live(*slot, now) && static_cast<int32_t>(e.expires - slot->expires) < 0)) {
      slot = &e;
    }
  }
  slot->datagram = d;
  slot->outcome = o;
  slot->expires = expires;
  slot->used = true;
}

const FragmentTable::Outcome* FragmentTable::find(uint32_t hash, const Datagram& d,
                                                  uint32_t now) const noexcept {
  for (const Entry& e : bucket(hash).ways)
    if (live(e, now) && same(e.datagram, d)) return &e.outcome;
  return nullptr;
}

}  // namespace vecflow
