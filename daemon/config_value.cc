#include "config_value.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "kvstream/policies.h"  // ParseBytes

namespace kvstream {

std::string Where(const YAML::Node& node, const std::string& key) {
  const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  return mark.is_null() ? "'" + key + "'" : "'" + key + "' (line " + std::to_string(mark.line + 1) + ")";
}

void ConfigValue::Fail(const std::string& what) const { throw ConfigError{Where(node_, key_) + what}; }

std::string ConfigValue::Str() const {
  if (!node_.IsScalar()) Fail(" must be a string");
  return node_.as<std::string>();
}

uint64_t ConfigValue::Bytes() const {
  absl::StatusOr<uint64_t> v = ParseBytes(Str());
  if (!v.ok()) Fail(": " + std::string(v.status().message()));
  return *v;
}

uint32_t ConfigValue::Uint() const {
  uint32_t v;
  if (!node_.IsScalar() || !absl::SimpleAtoi(node_.as<std::string>(), &v)) Fail(" must be a non-negative integer");
  return v;
}

double ConfigValue::Seconds() const {
  const std::string text = Str();
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  double value;
  const std::string unit = text.substr(end);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : -1;
  if (end == 0 || scale < 0 || !absl::SimpleAtod(text.substr(0, end), &value)) {
    Fail(" must be a duration such as 50ms, 2s or 0.5");
  }
  return value * scale;
}

double ConfigValue::Number() const {
  double v;
  if (!node_.IsScalar() || !absl::SimpleAtod(node_.as<std::string>(), &v)) Fail(" must be a number");
  return v;
}

bool ConfigValue::Bool() const {
  const std::string s = Str();
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  Fail(" must be true or false");
}

}  // namespace kvstream
