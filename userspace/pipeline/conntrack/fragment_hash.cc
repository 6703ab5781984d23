#include "pipeline/conntrack/fragment_hash.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace vecflow::fragment_hash {

namespace {

struct FirstFragments {
  struct Slot {
    FragmentTable::Datagram datagram;
    bool used;
    uint32_t hash;
  };
  static constexpr unsigned kBits = 8;
  std::array<Slot, 1u << kBits> slots;

  Slot& at(const FragmentTable::Datagram& d) noexcept {
    uint64_t w[4];
    std::memcpy(w, d.src.data(), 16);
    std::memcpy(w + 2, d.dst.data(), 16);
    const uint64_t x = (w[0] + w[1] * 0x9e3779b97f4a7c15ull) ^
                       (w[2] + w[3] * 0xc2b2ae3d27d4eb4full) ^
                       ((uint64_t{d.id} << 8 | d.proto) * 0x165667b19e3779f9ull);
    return slots[static_cast<unsigned>((x * 0xbf58476d1ce4e5b9ull) >> (64 - kBits))];
  }
};
// Static storage (no allocation on the receive path): 12 KB per thread.
thread_local FirstFragments tl_first;

}  // namespace

void remember_first(const rte_mbuf* m, const FragmentTable::Datagram& d) noexcept {
  tl_first.at(d) = {d, true, static_cast<uint32_t>(m->hash.rss)};
}

void give_later(rte_mbuf* m, const FragmentTable::Datagram& d) noexcept {
  const FirstFragments::Slot& s = tl_first.at(d);
  if (s.used && s.datagram == d) m->hash.rss = s.hash;
}

bool on_fragment(rte_mbuf* m) noexcept {
  if (!is_fragment(m)) return false;
  const FragmentOf f = fragment_of(m);
  if (f.later) {
    give_later(m, f.datagram);
  } else {
    remember_first(m, f.datagram);
  }
  return true;
}

}  // namespace vecflow::fragment_hash
