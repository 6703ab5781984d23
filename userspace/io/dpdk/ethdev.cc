#include "io/dpdk/ethdev.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <vector>

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <spdlog/sinks/base_sink.h>

#include "core/log.h"

namespace vecflow {
namespace {

// Collects what DPDK logs while a device is probed, so a failure can say DPDK's reason
// ("Couldn't open foo.pcap") and not only an errno. DPDK's log lines reach the "dpdk" logger
// (runtime/eal.cc); this sink is attached to it for the duration of one probe.
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> problems() {
    std::lock_guard lock(mutex_);
    return problems_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level >= spdlog::level::warn && problems_.size() < 16) {
      problems_.emplace_back(msg.payload.data(), msg.payload.size());
    }
  }
  void flush_() override {}

 private:
  std::vector<std::string> problems_;
};

class DpdkLogCapture {
 public:
  DpdkLogCapture() : logger_(log::get("dpdk")), sink_(std::make_shared<CaptureSink>()) {
    logger_->sinks().push_back(sink_);
  }
  ~DpdkLogCapture() {
    auto& sinks = logger_->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  bool said(std::string_view what) {
    for (const auto& p : sink_->problems()) {
      if (p.find(what) != std::string::npos) return true;
    }
    return false;
  }
  // " (DPDK: <the first thing DPDK complained about>)", or empty. The first line is the cause;
  // the ones after it are the layers above reporting the same failure.
  std::string reason() {
    auto all = sink_->problems();
    if (all.empty()) return {};
    std::string s = all.front();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
      s.pop_back();
    return " (DPDK: " + s + ")";
  }

 private:
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<CaptureSink> sink_;
};

// "net_pcap0,rx_pcap=a.pcap" -> "net_pcap0"; "0000:03:00.0" -> itself.
std::string device_name(const std::string& devargs) {
  return devargs.substr(0, devargs.find(','));
}

// The bus a devargs string names a device on: a PCI address, or a virtual device.
const char* bus_of(const std::string& name) {
  unsigned a, b, c;
  return std::sscanf(name.c_str(), "%x:%x.%x", &a, &b, &c) == 3 ||
                 name.find(':') != std::string::npos
             ? "pci"
             : "vdev";
}

}  // namespace

Result<EthDevice> EthDevice::probe(const std::string& devargs) {
  std::string name = device_name(devargs);
  uint16_t existing;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &existing) == 0) {
    return fail("DPDK device '{}' exists already (each port needs its own device name)", name);
  }
  DpdkLogCapture capture;
  int rc = rte_dev_probe(devargs.c_str());
  if (rc < 0) {
    std::string why = capture.reason();
    if (rc == -ENOENT || rc == -ENODEV || capture.said("failed to parse device")) {
      return fail(
          "DPDK found no driver or device for '{}'{}: check the driver name (net_ring, "
          "net_pcap, net_tap, net_vhost, net_af_xdp, ...) or the PCI address",
          devargs, why);
    }
    return fail("DPDK could not create '{}': {}{}", devargs, rte_strerror(-rc), why);
  }
  EthDevice d;
  d.name_ = name;
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    // A device whose ethdev has another name (multi-port PCI functions): take the first port
    // the devargs match.
    RTE_ETH_FOREACH_MATCHING_DEV(port, devargs.c_str(), nullptr) {
      d.port_ = port;
      break;
    }
    if (d.port_ == kNone) {
      rte_eal_hotplug_remove(bus_of(name), name.c_str());
      return fail("DPDK created '{}' but it has no ethernet port", devargs);
    }
  } else {
    d.port_ = port;
  }
  return d;
}

EthDevice& EthDevice::operator=(EthDevice&& o) noexcept {
  if (this != &o) {
    close();
    port_ = std::exchange(o.port_, kNone);
    name_ = std::move(o.name_);
    started_ = std::exchange(o.started_, false);
    rss_hash_ = o.rss_hash_;
    rx_intr_ = o.rx_intr_;
  }
  return *this;
}

EthDevice::~EthDevice() {
  close();
}

void EthDevice::close() noexcept {
  if (port_ == kNone) return;
  stop();
  rte_eth_dev_info info{};
  rte_device* dev = rte_eth_dev_info_get(port_, &info) == 0 ? info.device : nullptr;
  rte_eth_dev_close(port_);
  if (dev) rte_dev_remove(dev);
  port_ = kNone;
}

Result<void> EthDevice::configure(const EthQueueConfig& c) {
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port_, &info); rc != 0) {
    return fail("cannot read device info of {}: {}", name_, rte_strerror(-rc));
  }
  if (c.queues > info.max_rx_queues || c.queues > info.max_tx_queues) {
    return fail("device {} offers at most {} rx and {} tx queue(s); {} asked", name_,
                info.max_rx_queues, info.max_tx_queues, c.queues);
  }
  rte_eth_conf conf{};
  const uint64_t rss_types = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP |
                                                            RTE_ETH_RSS_UDP | RTE_ETH_RSS_SCTP);
  if (c.rss && c.queues > 1 && rss_types != 0) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = rss_types;
  }
  rss_hash_ = c.rss && rss_types != 0 && (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_RSS_HASH);
  if (rss_hash_) {
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_RSS_HASH;
    if (conf.rxmode.mq_mode == RTE_ETH_MQ_RX_NONE) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf = rss_types;
    }
  }
  if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) {
    // The route stage takes the device's verdict on IPv4 header checksums
    // (RTE_MBUF_F_RX_IP_CKSUM_GOOD/BAD) instead of summing every header again.
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  }
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE) {
    // Every mbuf we send comes from one pool with refcnt 1 at free: the PMD may skip the checks.
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  }
  // A frame larger than one mbuf (jumbo frames) is received as a chain, which the PMD does only
  // with scatter: without it the frame is dropped or cut. Asked only where the MTU needs it, as
  // a PMD's scattered receive path is slower than its one-buffer path. A device whose MTU is
  // raised above one mbuf later needs vecflowd restarted to receive whole frames.
  uint16_t current_mtu = 0;
  rte_eth_dev_get_mtu(port_, &current_mtu);
  const uint32_t frame = std::max<uint32_t>(c.mtu, current_mtu) + RTE_ETHER_HDR_LEN +
                         2 * RTE_VLAN_HLEN + RTE_ETHER_CRC_LEN;
  if (frame > uint32_t(rte_pktmbuf_data_room_size(c.pool) - RTE_PKTMBUF_HEADROOM) &&
      (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER)) {
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
  }
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  }
  int rc = -ENOTSUP;
  rx_intr_ = false;
  if (c.rx_interrupts) {
    conf.intr_conf.rxq = 1;
    DpdkLogCapture
        quiet;  // a PMD without rx interrupts may complain; that is an answer, not an error
    rc = rte_eth_dev_configure(port_, c.queues, c.queues, &conf);
    rx_intr_ = rc == 0;
  }
  if (rc != 0) {
    conf.intr_conf.rxq = 0;
    DpdkLogCapture capture;
    rc = rte_eth_dev_configure(port_, c.queues, c.queues, &conf);
    if (rc != 0) {
      return fail("cannot configure {} with {} queue(s): {}{}", name_, c.queues, rte_strerror(-rc),
                  capture.reason());
    }
  }
  uint16_t rxd = c.rx_descriptors, txd = c.tx_descriptors;
  if (int r = rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd); r != 0) {
    return fail("device {} rejects {}/{} descriptors: {}", name_, c.rx_descriptors,
                c.tx_descriptors, rte_strerror(-r));
  }
  int socket = rte_eth_dev_socket_id(port_);
  for (uint16_t q = 0; q < c.queues; ++q) {
    DpdkLogCapture capture;
    if (int r = rte_eth_rx_queue_setup(port_, q, rxd, socket, nullptr, c.pool); r != 0) {
      return fail("cannot set up rx queue {} of {} ({} descriptors): {}{}", q, name_, rxd,
                  rte_strerror(-r), capture.reason());
    }
    rte_eth_txconf txconf = info.default_txconf;
    txconf.offloads = conf.txmode.offloads;
    if (int r = rte_eth_tx_queue_setup(port_, q, txd, socket, &txconf); r != 0) {
      return fail("cannot set up tx queue {} of {} ({} descriptors): {}{}", q, name_, txd,
                  rte_strerror(-r), capture.reason());
    }
  }
  return {};
}

Result<void> EthDevice::start() {
  if (started_) return {};
  DpdkLogCapture capture;
  if (int rc = rte_eth_dev_start(port_); rc != 0) {
    return fail("cannot start {}: {}{}", name_, rte_strerror(-rc), capture.reason());
  }
  started_ = true;
  // Frames for other MACs are ours too (a router's ports see traffic for the next hops);
  // a PMD that has no such mode (vhost, ring) refuses, which changes nothing.
  DpdkLogCapture quiet;
  rte_eth_promiscuous_enable(port_);
  return {};
}

void EthDevice::stop() noexcept {
  if (!started_) return;
  rte_eth_dev_stop(port_);
  started_ = false;
}

LinkState EthDevice::link_state() const noexcept {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return LinkState::Unknown;
  return link.link_status == RTE_ETH_LINK_UP ? LinkState::Up : LinkState::Down;
}

MacAddress EthDevice::mac() const noexcept {
  MacAddress m;
  rte_ether_addr a{};
  if (rte_eth_macaddr_get(port_, &a) == 0) std::copy_n(a.addr_bytes, 6, m.bytes.begin());
  return m;
}

std::vector<std::pair<DropReason, uint64_t>> EthDevice::drops() const {
  std::vector<std::pair<DropReason, uint64_t>> out;
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_, &s) != 0) return out;
  auto add = [&](DropReason r, uint64_t v) {
    if (v) out.emplace_back(r, v);
  };
  add(DropReason::RX_MISSED, s.imissed);
  add(DropReason::NOMBUF, s.rx_nombuf);
  add(DropReason::RX_ERROR, s.ierrors);
  add(DropReason::TX_ERROR, s.oerrors);
  return out;
}

std::vector<std::pair<std::string, uint64_t>> EthDevice::xstats() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  int n = rte_eth_xstats_get_names(port_, nullptr, 0);
  if (n <= 0) return out;
  std::vector<rte_eth_xstat_name> names(n);
  std::vector<rte_eth_xstat> values(n);
  if (rte_eth_xstats_get_names(port_, names.data(), n) != n) return out;
  int got = rte_eth_xstats_get(port_, values.data(), n);
  for (int i = 0; i < got && i < n; ++i) {
    if (values[i].id < static_cast<uint64_t>(n)) {
      out.emplace_back(names[values[i].id].name, values[i].value);
    }
  }
  return out;
}

}  // namespace vecflow
