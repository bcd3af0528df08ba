// The memory kvstreamd may use, and the sizes its config's `auto` takes from it.
#pragma once

#include <cstdint>
#include <string>

namespace kvstream {

// The memory this process may use: the node's RAM, or less where its cgroup or an ancestor's says
// so (v2 memory.max, v1 memory.limit_in_bytes), as in a pod or a unit with a memory limit.
uint64_t MemoryLimit();
// The same with every file read under `root` instead of "/" and `physical` bytes of RAM (tests).
uint64_t MemoryLimitUnder(const std::string& root, uint64_t physical);

// sessions.arena_budget: auto: a quarter of MemoryLimit(). Arenas are pinned for O_DIRECT and
// registered buffers, so they must never crowd out the engines and the page cache.
uint64_t DefaultArenaBudget();

// staging.limit: auto: 1/32 of MemoryLimit(), 256 MiB to 16 GiB. Staging holds what a forward
// pass produces until it is written while reads are idle; a node with more memory serves more,
// longer requests at once, which produce more KV per step.
uint64_t DefaultStagingLimit();

}  // namespace kvstream
