// AcceptSlotted: what both kvstreamd sockets do with a connection before anything else. The peer's
// credentials are read off it (SO_PEERCRED) and its uid takes a slot of a kind bounded in total
// and per uid (uid_slots.h); a connection without one is closed at once and the refusal logged at
// most once per interval (throttled_warning.h), so no client can hold another's slots, make the
// serving thread wait, or flood the log. Serving thread of the listener.
#pragma once

#include <cstdint>
#include <optional>

#include "callers.h"
#include "throttled_warning.h"
#include "uid_slots.h"
#include "unix_listener.h"

namespace kvstream {

struct SlottedConnection {
  int fd = -1;  // the caller's from here on
  PeerCredentials peer;
  UidSlots::Slot slot;
};

// The next waiting connection of `listener` that took a slot of `slots`, or nullopt when none is
// left waiting (connections refused meanwhile are closed, counted in `refusals`). `now_ms`: the
// steady clock.
std::optional<SlottedConnection> AcceptSlotted(UnixListener& listener, UidSlots& slots, ThrottledWarning& refusals,
                                               int64_t now_ms);

}  // namespace kvstream
