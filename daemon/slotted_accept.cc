#include "slotted_accept.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace kvstream {

std::optional<SlottedConnection> AcceptSlotted(UnixListener& listener, UidSlots& slots, ThrottledWarning& refusals,
                                               int64_t now_ms) {
  for (int c; (c = listener.Accept(now_ms)) >= 0;) {
    absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(c);
    absl::StatusOr<UidSlots::Slot> slot = peer.ok() ? slots.Take(peer->uid) : peer.status();
    if (slot.ok()) return SlottedConnection{c, *std::move(peer), *std::move(slot)};
    refusals.Warn(now_ms, absl::StrCat(listener.name(), ": refused a connection: ", slot.status().message()));
    close(c);
  }
  return std::nullopt;
}

}  // namespace kvstream
