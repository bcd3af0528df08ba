// forge_payload: rewrites the payload of a chunk file in place so that every segment keeps its
// XXH3-64 checksum, leaving its header exactly as it was (tests/support/xxh3_forgery.h): the attack
// a writer of a shared tier can make on a chunk whose payload is bound only to XXH3. Prints how
// many payload bytes it changed; exits 1 if the file is not a chunk it can rewrite so.
//
// Usage: forge_payload FILE [FILL]   (FILL: the byte the attacker's content is made of, default 0x41)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "xxh3_forgery.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: forge_payload FILE [FILL]\n");
    return 2;
  }
  const auto fill = static_cast<uint8_t>(argc == 3 ? std::strtoul(argv[2], nullptr, 0) : 0x41);
  const absl::StatusOr<size_t> changed = kvstream::testing::ForgeChunkPayload(argv[1], fill);
  if (!changed.ok()) {
    std::fprintf(stderr, "forge_payload: %s\n", std::string(changed.status().message()).c_str());
    return 1;
  }
  std::printf("%zu payload bytes changed, every segment checksum kept\n", *changed);
  return 0;
}
