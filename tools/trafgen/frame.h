// Test frames for the traffic generator: Ethernet + IPv4/IPv6 + UDP/TCP with a payload header
// that carries the flow number and a per-flow sequence number, so the receiver can measure
// loss and reordering per flow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/net.h"

namespace vecflow::trafgen {

// At the start of every payload: 18 bytes, so an IPv4/UDP frame still fits 64 B on the wire.
// Packed and read with memcpy (frames give no alignment). Host byte order: sender and
// receiver are this program on the same host.
struct __attribute__((packed)) PayloadHeader {
  uint16_t magic;
  uint32_t flow;
  uint32_t seq;    // per flow, from 0
  uint64_t tx_ns;  // CLOCK_REALTIME when the sender wrote the frame into its TX ring
};
static_assert(sizeof(PayloadHeader) == 18);
inline constexpr uint16_t kMagic = 0x7674;  // "vt"

struct FrameSpec {
  MacAddress src_mac;
  MacAddress dst_mac;
  IpAddress src_ip;
  IpAddress dst_ip;
  bool tcp = false;
  uint8_t tcp_flags = 0x18;  // PSH|ACK: a data segment of an established connection; SYN: a flood
  uint16_t src_port =
      1024;  // flow f uses src_port + f % 60000 (flows beyond that vary the address)
  uint16_t dst_port = 9;
  size_t frame_size = 60;  // without FCS: 60 is a "64 B" frame on the wire
};

// A prebuilt frame of one flow and where its variable fields sit.
struct FlowFrame {
  std::vector<uint8_t> bytes;
  size_t payload_offset;   // PayloadHeader position
  size_t checksum_offset;  // L4 checksum position, or 0 when it is left zero (IPv4 UDP)
};

// Smallest frame that holds all headers and the payload header.
size_t min_frame_size(const FrameSpec& spec);

// Builds the frame of flow `flow` (0-based) with sequence 0. Flows differ in source port and,
// past 60000 flows, in the low bits of the source address.
FlowFrame build_flow_frame(const FrameSpec& spec, uint32_t flow);

// Writes seq and tx_ns into the frame and updates the L4 checksum incrementally (RFC 1624):
// O(1) per packet whatever the frame size.
void stamp(FlowFrame& f, uint8_t* frame, uint32_t seq, uint64_t tx_ns);

// Reads the payload header of a received frame (Ethernet, optional VLAN tags, IPv4/IPv6,
// UDP/TCP). Returns false when the frame is not one of ours.
bool read_payload(const uint8_t* frame, size_t len, PayloadHeader& out);

}  // namespace vecflow::trafgen
