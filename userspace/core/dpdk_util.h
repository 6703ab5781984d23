// RAII owners for the DPDK objects the stages build, and unique names for them (DPDK keys
// tables, rings and pools by a name of at most 31 characters, unique per process).
#pragma once

#include <memory>
#include <string>
#include <string_view>

struct rte_hash;
struct rte_ring;
struct rte_mempool;
struct rte_fib;
struct rte_fib6;
struct rte_acl_ctx;

namespace vecflow {

struct DpdkFree {
  void operator()(rte_hash* h) const noexcept;
  void operator()(rte_ring* r) const noexcept;
  void operator()(rte_mempool* p) const noexcept;
  void operator()(rte_fib* f) const noexcept;
  void operator()(rte_fib6* f) const noexcept;
  void operator()(rte_acl_ctx* c) const noexcept;
};

template <typename T>
using DpdkPtr = std::unique_ptr<T, DpdkFree>;

// "vf_<what>_<n>": `what` is cut to 12 characters, n counts up per process.
std::string dpdk_name(std::string_view what);

}  // namespace vecflow
