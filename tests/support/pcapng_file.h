// Capture files read back in tests: with libpcap, as tcpdump -r would, and block by block, to
// see what libpcap does not tell (interface names, the interface and direction of a packet).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vecflow::test {

struct CapturedPacket {
  uint32_t caplen = 0;
  uint32_t len = 0;  // on the wire
  uint64_t ts_ns = 0;
  std::vector<uint8_t> data;
  // From the enhanced packet block itself.
  uint32_t interface = 0;
  uint32_t flags = 0;  // epb_flags; bits 0-1: 1 inbound, 2 outbound
};

struct CaptureFile {
  std::string error;  // empty: both libpcap and the block walk accepted the file
  int datalink = -1;
  std::vector<std::string> interfaces;  // if_name of each interface block
  std::vector<CapturedPacket> packets;
};

// Fails (error set) if libpcap refuses the file, if a block's two lengths disagree, or if the
// two readings do not agree on the packets.
CaptureFile read_capture(const std::string& path);

}  // namespace vecflow::test
