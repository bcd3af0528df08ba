// A warning a client can cause at will (daemon/throttled_warning.h): one line per interval, the
// next one saying how many were held back meanwhile.
#include "throttled_warning.h"

#include <catch2/catch.hpp>

#include <memory>
#include <sstream>
#include <string>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace kvstream::testing {
namespace {

// The lines logged meanwhile, each without its time and level.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string Take() {
    std::string s = out_.str();
    out_.str("");
    return s;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_CASE("a warning is logged once per interval, the next line counting those held back") {
  CapturedLog log;
  ThrottledWarning refused;  // the default interval: 10 s
  refused.Warn(1'000, "refused");
  CHECK(log.Take() == "refused\n");
  for (int64_t t = 1'010; t < 11'000; t += 10) refused.Warn(t, "refused");  // 999 within the interval
  CHECK(log.Take().empty());
  refused.Warn(11'000, "refused");
  CHECK(log.Take() == "refused (999 more like it in the last 10 s)\n");
  refused.Warn(30'000, "refused");
  CHECK(log.Take() == "refused\n");  // none held back since
  // Each kind is throttled on its own.
  ThrottledWarning paused;
  paused.Warn(30'001, "paused");
  CHECK(log.Take() == "paused\n");
}

}  // namespace
}  // namespace kvstream::testing
