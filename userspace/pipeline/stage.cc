#include "pipeline/stage.h"

namespace vecflow {

uint16_t StageContext::port_index(const std::string& name) const noexcept {
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].name == name) return static_cast<uint16_t>(i);
  }
  return kNoPortIndex;
}

Stage::Stage(std::string type, std::string name, unsigned lcore_slots)
    : type_(std::move(type)),
      name_(std::move(name)),
      slots_(lcore_slots),
      stats_(new StageLcoreStats[lcore_slots]) {}

StageStats Stage::stats(unsigned slot) const noexcept {
  StageStats s;
  if (slot >= slots_) return s;
  s.calls = stats_[slot].calls.load();
  s.packets = stats_[slot].packets.load();
  s.cycles = stats_[slot].cycles.load();
  return s;
}

StageStats Stage::stats() const noexcept {
  StageStats s;
  for (unsigned i = 0; i < slots_; ++i) {
    s.calls += stats_[i].calls.load();
    s.packets += stats_[i].packets.load();
    s.cycles += stats_[i].cycles.load();
  }
  return s;
}

}  // namespace vecflow
