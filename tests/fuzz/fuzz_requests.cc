// libFuzzer: data-path requests (RetrieveRequest and PersistRequest wire bytes, as a hostile client
// sends them) through the daemon's admission. Never crashes; a request it admits names a live
// session with its token and lies inside that session's arena with valid keys.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "admission.h"
#include "kvstream/key.h"
#include "sessions.h"

namespace {

struct Fixture {
  kvstream::SessionManager sessions{"/tmp/kvstream-fuzz-unused.sock", 1 << 20, 8 << 20};
  std::shared_ptr<kvstream::Session> session = *sessions.Create("fuzz", 0, 1, 1 << 20);
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = new Fixture;
  if (size == 0) return 0;
  // The first byte picks the session's real id and token or the request's own, so both the
  // refusal and the admission paths are reached.
  const bool own = data[0] & 1;
  kvstream::v1::RetrieveRequest req;
  if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  if (own) {
    req.set_session_id(f->session->id);
    req.set_token(f->session->token);
  }
  auto admitted = kvstream::Admit(f->sessions, req);
  if (admitted.ok()) {
    if (*admitted != f->session || req.chunks().empty()) __builtin_trap();
    for (const auto& c : req.chunks()) {
      if (!kvstream::ValidateKey(c.key()).ok() || c.length() == 0 || c.offset() > (*admitted)->arena->size() ||
          c.length() > (*admitted)->arena->size() - c.offset()) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
