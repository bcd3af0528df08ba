#include "throttled_warning.h"

#include "spdlog/spdlog.h"

namespace kvstream {

void ThrottledWarning::Warn(int64_t now_ms, const std::string& message) {
  absl::MutexLock lock(&mu_);
  if (logged_ && now_ms - logged_ms_ < interval_ms_) {
    ++held_back_;
    return;
  }
  if (held_back_ > 0) {
    spdlog::warn("{} ({} more like it in the last {} s)", message, held_back_, (now_ms - logged_ms_) / 1000);
  } else {
    spdlog::warn("{}", message);
  }
  logged_ = true;
  logged_ms_ = now_ms;
  held_back_ = 0;
}

}  // namespace kvstream
