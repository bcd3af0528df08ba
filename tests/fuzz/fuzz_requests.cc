// libFuzzer: data-path requests (RetrieveRequest and PersistRequest wire bytes, as a hostile client
// sends them) through the daemon's admission. Never crashes; a request it admits names a live
// session with its token and lies inside that session's arena or its client region (region 1, an
// unsealed memfd: reached through its descriptor) with valid keys.
#include <sys/mman.h>
#include <unistd.h>

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
  uint32_t region = AddRegion();

  uint32_t AddRegion() {
    const int fd = memfd_create("fuzz-region", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) __builtin_trap();
    return *sessions.AddRegion(*session, fd, 1 << 20);
  }
};

// Where a chunk may be: [begin, end) of daemon-mapped memory and the descriptor to use for it.
bool Inside(const kvstream::ChunkTarget& t, uint64_t length, const uint8_t* begin, uint64_t size, int fd) {
  return t.data >= begin && t.data + length <= begin + size && t.fd == fd &&
         (fd < 0 || t.fd_offset == static_cast<uint64_t>(t.data - begin));
}

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
    if (admitted->session != f->session || req.chunks().empty() ||
        admitted->chunks.size() != static_cast<size_t>(req.chunks().size())) {
      __builtin_trap();
    }
    const kvstream::Arena& arena = *f->session->arena;
    const kvstream::ClientRegion& region = *f->session->Region(f->region)->memory;
    for (int i = 0; i < req.chunks().size(); ++i) {
      const auto& c = req.chunks(i);
      const kvstream::AdmittedChunk& admitted_chunk = admitted->chunks[i];
      if (admitted_chunk.offset != c.offset() || admitted_chunk.length != c.length()) __builtin_trap();
      const kvstream::ChunkTarget& t = admitted_chunk.target;
      const bool in_arena = c.region() == 0 && Inside(t, c.length(), arena.data(), arena.size(), -1);
      const bool in_region =
          c.region() == f->region && Inside(t, c.length(), region.data(), region.size(), region.fd());
      if (!kvstream::ValidateKey(c.key()).ok() || c.length() == 0 || !(in_arena || in_region)) __builtin_trap();
    }
  }
  return 0;
}
