// Appliance files the tests share.
#pragma once

#include <string>
#include <string_view>

namespace vecflow::test {

// A small router on two net_null DPDK ports (wan, lan): acl (parallel; denies telnet) ->
// route (atomic; lan's 198.51.100.0/24, a default via 192.0.2.254 on wan, 192.0.2.1 to the
// kernel) -> neighbour (fused; static entries for the default's next hop and 198.51.100.9).
// `more_stages`: items appended to the pipeline list, indented as its items are ("  - ...").
inline std::string router_appliance(std::string_view more_stages = "") {
  return std::string(R"(
ports:
  - {name: wan, type: dpdk, devargs: net_null0}
  - {name: lan, type: dpdk, devargs: net_null1}
pipeline:
  - stage: acl
    sched: parallel
    default: permit
    rules:
      - {name: no-telnet, action: deny, proto: tcp, dst_port: 23}
  - stage: route
    sched: atomic
    routes:
      - {prefix: 198.51.100.0/24, port: lan}
      - {prefix: 0.0.0.0/0, via: 192.0.2.254, port: wan}
      - {prefix: 192.0.2.1/32, action: kernel}
  - stage: neighbour
    fuse: true
    from_kernel: false
    unresolved: drop
    static:
      - {ip: 192.0.2.254, mac: "02:00:00:00:00:fe", port: wan}
      - {ip: 198.51.100.9, mac: "02:00:00:00:01:09", port: lan}
)") + std::string(more_stages);
}

}  // namespace vecflow::test
