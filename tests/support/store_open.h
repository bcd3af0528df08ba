// Opens a Store on real files for a test, or exits as skipped where the kernel lacks io_uring.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "kvstream/store.h"
#include "test_util.h"

namespace kvstream::testing {

inline std::unique_ptr<Store> OpenStoreOrSkip(const StoreConfig& config) {
  auto store = Store::Open(config);
  if (absl::IsUnavailable(store.status())) {
    std::cerr << "SKIPPED: " << store.status() << " (io_uring is unavailable on this kernel)\n";
    std::exit(kSkipExitCode);
  }
  if (!store.ok()) FAIL(store.status().ToString());
  return *std::move(store);
}

}  // namespace kvstream::testing
