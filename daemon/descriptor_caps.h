// Descriptors held on clients' behalf, bounded (docs/security.md, "Bounded resources per uid").
// Every connection, pending request, identity and client region holds descriptors of the daemon's
// own; each kind is capped in total and per uid (UidSlots), and the caps are sized from the
// descriptors left once the daemon's own are counted, so that every kind at its total cap still
// fits: a client can be refused, but the daemon never runs out of descriptors on clients' account.
#pragma once

#include <cstdint>

#include "uid_slots.h"

namespace kvstream {

struct DescriptorCaps {
  UidSlots::Limits connections{1024, 256};  // control socket (gRPC) connections: 2 descriptors each
  UidSlots::Limits identities{1024, 256};   // callers proven on the data socket: 1 each
  UidSlots::Limits pending{256, 64};        // data socket connections still sending their frame: 2 each
  UidSlots::Limits queued{256, 64};         // data socket requests on each of its 2 lanes: 2 each
  UidSlots::Limits regions{1024, 256};      // client regions: 1 each
};

// The caps for `descriptors` left to clients: each kind its share of them, one uid a quarter of
// each kind, never below a floor that keeps the daemon usable (a node whose limit is too low to
// give that logs so at start).
DescriptorCaps SizeDescriptorCaps(uint64_t descriptors);
// The descriptors that every kind at its total cap holds.
uint64_t DescriptorsAtCaps(const DescriptorCaps& caps);

// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the soft limit in force.
uint64_t RaiseDescriptorLimit();
// The descriptors this process has open.
uint64_t OpenDescriptors();

}  // namespace kvstream
