// The `mirror` stage: copies the packets its match takes, as they are at this point of the
// pipeline, to a pcapng file under control.capture_dir or out of another port. The packets
// themselves go on unchanged.
//
// File: copies go through a PcapngCapture (hooks/pcapng_capture.h), vecflow's one capture, whose
// writer service the control lcore runs (control_service()); each copy is filed under its
// ingress port, direction unknown (mid-pipeline). Port: each copy (up to snaplen bytes) is a new
// packet from the stage's own pool, marked kMetaFlagCopy, handed to the runner (CopySink::copies);
// it is not charged to any port's accounting. A copy that finds no buffer is not made and is
// counted.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "hooks/pcapng_capture.h"
#include "pipeline/packet_match.h"
#include "pipeline/stage.h"

struct rte_mempool;

namespace vecflow {

// The keys of a `stage: mirror` entry (configs/reference.yaml).
struct MirrorConfig {
  config::FiveTupleMatch match;
  std::string pcapng;  // file to write, or
  std::string port;    // port to copy to
  uint32_t snaplen = 65535;
};

struct MirrorCounters {
  uint64_t matched = 0;  // packets the match took
  uint64_t copies = 0;   // copies made (file: queued for the writer; port: handed on)
  uint64_t lost = 0;     // copies not made: no buffer, or the writer's ring was full
};

class MirrorStage final : public Stage {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  // Buffers for port copies: ~2 ms of a 4 Mpps mirror in flight, 18 MB.
  static constexpr unsigned kCopyPool = 8191;
  // File copies that may wait for the writer: at 64-byte frames ~2 ms of a 10 Mpps mirror.
  static constexpr unsigned kCaptureRing = 16384;

  static Result<std::unique_ptr<MirrorStage>> create(const config::StageConfig& cfg,
                                                     StageContext& ctx);
  ~MirrorStage() override;

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  std::shared_ptr<Service> control_service() const override { return capture_; }
  // A port a reload added gets its interface in the file, so its copies are filed under it.
  void set_port(PortId id, const PortInfo& info) override;

  // The capture file (pcapng mode), else empty.
  std::string file() const { return capture_ ? capture_->path() : std::string(); }
  MirrorCounters counters() const noexcept;

 private:
  struct alignas(64) LcoreState {
    Counter matched, copies, lost;
  };
  MirrorStage(const config::StageConfig& cfg, StageContext& ctx);

  PacketMatch match_;
  uint32_t snaplen_;
  std::shared_ptr<PcapngCapture> capture_;
  rte_mempool* pool_ = nullptr;
  uint16_t port_ = 0;
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
};

struct StageModule;
// The mirror stage type: its configuration and factory.
StageModule mirror_stage_module();

}  // namespace vecflow
