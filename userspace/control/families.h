// Metric families shared by more than one part. A part's own families live in its adapter
// (control/parts/); these are the ones several parts add to, so that `vecflowctl errors` and a
// dashboard see every drop of the box in one family whichever layer dropped it.
#pragma once

#include "control/metrics.h"

namespace vecflow::control {

// Every drop of the box, by ingress port, reason (drop_reasons.h wire names) and the layer that
// dropped: "xdp" (the steering program), "userspace" (OutcomeTable: ports, scheduler,
// pipeline). A part that drops packets adds its counts here.
inline const MetricFamily kDrops{"vecflow_drops_total",
                                 "Packets dropped, by ingress port, reason and layer",
                                 MetricType::Counter,
                                 {"port", "reason", "layer"}};

// The OutcomeTable (core/accounting.h): what became of the packets that entered user space
// through each port. rx = tx + kernel + drops{layer="userspace"} once in-flight packets drain.
inline const MetricFamily kAccountRxPackets{"vecflow_accounting_rx_packets_total",
                                            "Packets that entered user space through a port",
                                            MetricType::Counter,
                                            {"port"}};
inline const MetricFamily kAccountRxBytes{"vecflow_accounting_rx_bytes_total",
                                          "Bytes that entered user space through a port",
                                          MetricType::Counter,
                                          {"port"}};
inline const MetricFamily kAccountTxPackets{
    "vecflow_accounting_tx_packets_total",
    "Packets transmitted, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kAccountTxBytes{
    "vecflow_accounting_tx_bytes_total",
    "Bytes transmitted, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kAccountKernelPackets{
    "vecflow_accounting_kernel_packets_total",
    "Packets handed to the kernel stack, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};

}  // namespace vecflow::control
