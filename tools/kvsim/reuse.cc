#include "reuse.h"

#include <cstddef>
#include <unordered_map>

namespace kvsim {
namespace {

// Fenwick tree over access positions: 1 at the latest access of each block.
class Fenwick {
 public:
  explicit Fenwick(size_t n) : t_(n + 1, 0) {}
  void Add(size_t i, int v) {
    for (++i; i < t_.size(); i += i & -i) t_[i] += v;
  }
  int64_t Prefix(size_t i) const {  // sum of [0, i)
    int64_t s = 0;
    for (; i > 0; i -= i & -i) s += t_[i];
    return s;
  }

 private:
  std::vector<int64_t> t_;
};

}  // namespace

std::vector<int64_t> ReuseDistances(const std::vector<uint64_t>& accesses) {
  std::vector<int64_t> out(accesses.size(), -1);
  std::unordered_map<uint64_t, size_t> last;
  last.reserve(accesses.size());
  Fenwick marks(accesses.size());
  for (size_t i = 0; i < accesses.size(); ++i) {
    auto it = last.find(accesses[i]);
    if (it != last.end()) {
      // Distinct blocks whose latest access lies strictly between the two accesses, plus itself.
      out[i] = marks.Prefix(i) - marks.Prefix(it->second + 1) + 1;
      marks.Add(it->second, -1);
      it->second = i;
    } else {
      last.emplace(accesses[i], i);
    }
    marks.Add(i, 1);
  }
  return out;
}

Demand StorageDemand(const std::vector<int64_t>& distances, uint64_t capacity_blocks) {
  Demand d;
  for (int64_t x : distances) {
    if (x < 0) continue;
    ++d.reuses;
    if (static_cast<uint64_t>(x) > capacity_blocks) ++d.beyond;
  }
  return d;
}

}  // namespace kvsim
