// Receiving from a vecflow Port in a test, the way a poller would: every rx queue in turn, until
// enough packets came or the time ran out. The io tests of every port type use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <rte_mbuf.h>

#include "io/port.h"

namespace vecflow::test {

// Polls every rx queue of `port` until `want` packets came or `ms` passed; pauses 100 us after
// a round that found nothing. `queue_of`, when given, gets the queue of each packet returned.
std::vector<rte_mbuf*> receive(Port& port, size_t want, int ms = 3000,
                               std::vector<uint16_t>* queue_of = nullptr);

// Frees every mbuf of `pkts` and empties it.
void free_all(std::vector<rte_mbuf*>& pkts);

}  // namespace vecflow::test
