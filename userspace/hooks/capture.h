// Packet capture to a pcapng file without slowing the data path down: workers copy packets
// (DPDK's rte_pcapng_copy: a snapshot of up to `snaplen` bytes, formatted as a pcapng enhanced
// packet block, in a buffer of the capture's own pool) into a ring; a service on the control
// lcore writes the ring to the file. A copy that finds the pool or the ring exhausted is not
// made and is counted (`dropped`); the packet itself is never affected.
//
// The file describes every vecflow port as one pcapng interface (interface i = PortId i), so
// the capture shows where each packet was seen. (DPDK 22.11's rte_pcapng_fdopen would describe
// only ethdev ports, and vecflow ports are not all ethdevs, so the section and interface
// blocks are written here.)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <rte_mbuf.h>

#include "core/counter.h"
#include "core/error.h"
#include "runtime/service.h"

struct rte_ring;
struct rte_mempool;

namespace vecflow {

enum class CaptureDirection : uint8_t { Unknown = 0, In = 1, Out = 2 };

struct CaptureStats {
  uint64_t captured = 0;  // copies made
  uint64_t written = 0;   // copies written to the file
  uint64_t dropped = 0;   // copies not made: pool or ring full
  uint64_t bytes = 0;     // bytes written
  uint64_t write_errors = 0;
};

class PcapngCapture final : public Service {
 public:
  // Copies that may wait for the writer: at 64-byte frames ~2 ms of a 10 Mpps capture, and
  // the pool holds as many buffers (plus the per-lcore caches).
  static constexpr unsigned kRingSize = 16384;
  // Copies written per poll, so one poll stays short.
  static constexpr unsigned kWriteBurst = 256;

  // Creates `path` (truncating it) and writes the section header and one interface block per
  // name in `ports` (PortId order).
  static Result<std::shared_ptr<PcapngCapture>> open(const std::string& path,
                                                     const std::vector<std::string>& ports,
                                                     uint32_t snaplen);
  ~PcapngCapture() override;

  // Data path, any lcore: copies each packet (seen on its m->port). Never blocks. Returns the
  // copies queued for the writer; the others were lost (and counted).
  size_t capture(std::span<rte_mbuf* const> pkts, CaptureDirection dir, uint32_t queue) noexcept;

  // Writes what the ring holds (up to kWriteBurst copies). Control lcore.
  bool poll() noexcept override;
  // Writes everything queued so far. Call after the producers stopped, before closing.
  void flush() noexcept;

  const std::string& path() const noexcept { return path_; }
  CaptureStats stats() const noexcept;

 private:
  PcapngCapture() : Service("capture") {}
  unsigned write_some(unsigned max) noexcept;

  std::string path_;
  int fd_ = -1;
  uint32_t snaplen_ = 0;
  rte_ring* ring_ = nullptr;
  rte_mempool* pool_ = nullptr;
  std::atomic<uint64_t> captured_{0};  // several lcores may capture at once
  std::atomic<uint64_t> dropped_{0};
  Counter written_;  // the writer's
  Counter bytes_;
  Counter write_errors_;
};

}  // namespace vecflow
