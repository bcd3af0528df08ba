// A cluster MAC key for tests that sign and verify chunks (the key file format is io/cluster_key_file.h).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "format/chunk_mac.h"

namespace kvstream::testing {

// The key made of 32 bytes of `fill`: equal fills give equal keys, different fills keys that
// verify nothing the other signed.
inline std::shared_ptr<const ChunkMacKey> MacKey(uint8_t fill) {
  const std::vector<uint8_t> material(32, fill);
  auto key = ChunkMacKey::FromBytes(material.data(), material.size());
  REQUIRE(key.ok());
  return *key;
}

}  // namespace kvstream::testing
