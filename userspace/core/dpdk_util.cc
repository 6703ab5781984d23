#include "core/dpdk_util.h"

#include <atomic>

#include <fmt/format.h>
#include <rte_acl.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>
#include <rte_mempool.h>
#include <rte_ring.h>

namespace vecflow {

void DpdkFree::operator()(rte_hash* h) const noexcept {
  rte_hash_free(h);
}
void DpdkFree::operator()(rte_ring* r) const noexcept {
  rte_ring_free(r);
}
void DpdkFree::operator()(rte_mempool* p) const noexcept {
  rte_mempool_free(p);
}
void DpdkFree::operator()(rte_fib* f) const noexcept {
  rte_fib_free(f);
}
void DpdkFree::operator()(rte_fib6* f) const noexcept {
  rte_fib6_free(f);
}
void DpdkFree::operator()(rte_acl_ctx* c) const noexcept {
  rte_acl_free(c);
}

std::string dpdk_name(std::string_view what) {
  static std::atomic<unsigned> counter{0};
  return fmt::format("vf_{}_{}", what.substr(0, 12), counter.fetch_add(1));
}

}  // namespace vecflow
