// For the tests of files a tier directory may hold that the daemon never wrote (safe_open, the
// tier's chunk files): each case run with both path resolutions, and socket files to be refused.
#pragma once

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "io/safe_open.h"

namespace kvstream::testing {

// Runs the rest of the test case with openat2 and with the component walk.
inline void PickResolution() {
  const bool walk = GENERATE(false, true);
  ForceComponentWalkForTesting(walk);
  INFO((walk ? "component walk" : "openat2 where available"));
}

// Binds a Unix socket at `path` (closed again: the socket file stays).
inline void MakeSocketFile(const std::string& path) {
  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, path.c_str());
  REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  close(s);
}

}  // namespace kvstream::testing
