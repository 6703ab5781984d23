// vecflow's one packet capture: copies of packets into a pcapng file, without slowing the data
// path down. It serves `vecflowctl capture` (control/capture.h: a port's rx/tx bursts, through
// the hook points, hooks/capture_hook.h) and the mirror stage (pipeline/mirror_stage.h: the
// packets its match takes, mid-pipeline).
//
// The data path calls capture() on any lcore: it copies each packet (up to snaplen bytes, from
// the capture's own pool, with a CaptureRecord in the buffer's private area) into a ring. It
// copies, never holds: the data path keeps its packets. A copy that finds the pool or the ring
// exhausted is not made and is counted (`lost`); the packet itself is never affected. No
// allocation, lock, log or exception on that path: a copy from a mempool per packet, a ring
// enqueue and a few relaxed atomic adds per burst.
//
// The writer (poll(), flush()) runs on the control lcore or the control thread: it takes the
// copies off the ring and writes each as a pcapng enhanced packet block, by writev of a block
// header, the copy's segments and a trailer, all in stack buffers: no allocation either.
//
// The file: a section header, one interface block per entry of `interfaces` (a vecflow port and
// its name; a copy is filed under the interface of its port), nanosecond timestamps, the
// direction in each packet's epb_flags. Readable by tcpdump -r, tshark, Wireshark and libpcap.
//
// Why not DPDK's rte_pcapng (22.11) or libpcap: rte_pcapng_fdopen describes, and
// rte_pcapng_write_packets numbers, the DPDK ethdev ports only, and vecflow's AF_XDP ports are
// not ethdevs (nor are the names vecflow's); rte_pcapng_copy, the one part that would fit, stamped
// packets some 8e9 s ahead of the real time when tried with the installed 22.11.11 (and it
// formats the block on the data path, where a plain copy is cheaper). libpcap 1.10 writes pcap, not
// pcapng.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <rte_mbuf.h>

#include "core/counter.h"
#include "core/error.h"
#include "core/ids.h"
#include "runtime/service.h"

struct rte_bpf;
struct rte_mempool;
struct rte_ring;

namespace vecflow {

// Where a packet was seen. The values are pcapng's epb_flags direction bits; as a mask
// (kCaptureRx | kCaptureTx) they say which bursts a capture takes.
enum CaptureDirection : uint8_t { kCaptureUnknown = 0, kCaptureRx = 1, kCaptureTx = 2 };

// Stored in the private area of every copy (rte_mbuf_to_priv).
struct CaptureRecord {
  uint64_t tsc;       // when the data path saw the packet
  uint32_t wire_len;  // length of the original packet; the copy may be shorter (snaplen)
  uint16_t port;      // vecflow port: the file's interface
  uint8_t direction;  // CaptureDirection
  uint8_t pad;
};

struct CaptureStats {
  uint64_t offered = 0;   // packets offered to capture() (before the filter)
  uint64_t captured = 0;  // copies made and queued for the writer
  uint64_t lost = 0;      // copies not made: pool or ring full
  uint64_t written = 0;   // copies written to the file
  uint64_t bytes = 0;     // packet bytes written (the copies, not the block headers)
  uint64_t write_errors = 0;
  int last_error = 0;  // errno of the last write that failed
};

struct CaptureOptions {
  std::string path;
  bool exclusive = false;  // refuse an existing file (or a link); else truncate it
  // One pcapng interface each; a copy is filed under the interface of its port.
  std::vector<std::pair<PortId, std::string>> interfaces;
  uint32_t snaplen = 0;
  uint8_t directions = kCaptureRx | kCaptureTx;  // bursts of unknown direction are always taken
  rte_bpf* filter = nullptr;                     // null: every packet; owned by the capture
  uint64_t limit = 0;  // write at most this many packets, drop the copies after; 0: no limit
  // The ring holds the copies waiting for the writer; the pool has `pool_size` buffers of
  // min(snaplen, RTE_MBUF_DEFAULT_DATAROOM) bytes (a longer copy is chained).
  std::string ring_name;
  std::string pool_name;
  unsigned ring_size = 4096;
  unsigned pool_size = 4095;
  unsigned pool_cache = 0;
};

class PcapngCapture final : public Service {
 public:
  // Copies written per poll, so one poll stays short.
  static constexpr unsigned kWriteBurst = 256;

  // Creates the file and writes its section header and interface blocks, the ring and the pool.
  // On failure nothing is left behind (a file it created is removed).
  static Result<std::shared_ptr<PcapngCapture>> open(CaptureOptions options);
  ~PcapngCapture() override;

  // ---- data path, any lcore ----
  bool wants(CaptureDirection dir) const noexcept {
    return dir == kCaptureUnknown || (options_.directions & dir) != 0;
  }
  // Copies the packets that pass the filter, each filed under `port` or, when none is given,
  // under its m->port (the ingress port). Returns the copies queued for the writer.
  size_t capture(std::span<rte_mbuf* const> pkts, CaptureDirection dir,
                 std::optional<PortId> port = std::nullopt) noexcept;

  // A port the file does not describe yet (a reload added it): its interface block goes in
  // before the first of its copies (the writer writes it; control thread). A port described
  // already keeps its interface.
  void add_interface(PortId port, const std::string& name);

  // ---- writer, one thread ----
  // Writes what the ring holds (up to kWriteBurst copies).
  bool poll() noexcept override;
  // Writes everything queued so far. Call after the producers stopped, before closing.
  void flush() noexcept;
  // Whether `limit` packets were written.
  bool full() const noexcept { return options_.limit != 0 && written_.load() >= options_.limit; }

  const std::string& path() const noexcept { return options_.path; }
  CaptureStats stats() const noexcept;

 private:
  explicit PcapngCapture(CaptureOptions options);
  unsigned write_some(unsigned max) noexcept;
  void write_new_interfaces() noexcept;
  uint64_t to_ns(uint64_t tsc) const noexcept;

  CaptureOptions options_;
  int fd_ = -1;
  rte_ring* ring_ = nullptr;
  rte_mempool* pool_ = nullptr;
  static constexpr uint32_t kNoInterface = UINT32_MAX;
  uint32_t interface_of_[kMaxPorts];  // PortId -> interface index in the file (the writer's)
  uint32_t interfaces_ = 0;           // blocks in the file
  // Interface blocks add_interface made, for the writer to write: taken under the mutex, which
  // the writer locks only when `new_interfaces_` says there are some.
  std::mutex new_mutex_;
  std::vector<std::pair<PortId, std::string>> new_blocks_;
  std::atomic<bool> new_interfaces_{false};
  uint64_t start_tsc_ = 0;  // the clock the timestamps count from
  uint64_t start_ns_ = 0;
  uint64_t tsc_hz_ = 0;
  // Several lcores may capture at once: atomic adds, paid only by captured traffic.
  std::atomic<uint64_t> offered_{0};
  std::atomic<uint64_t> captured_{0};
  std::atomic<uint64_t> lost_{0};
  Counter written_;  // the writer's
  Counter bytes_;
  Counter write_errors_;
  std::atomic<int> last_error_{0};
};

}  // namespace vecflow
