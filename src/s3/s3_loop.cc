#include "s3/s3_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "thread_name.h"

namespace kvstream {
namespace {

constexpr int64_t kDrainNs = 2'000'000'000;  // at stop, for internal exchanges (aborts)

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });  // never cleaned up: the process's
}

absl::Status CheckEndpoint(const std::string& endpoint, std::string* scheme, std::string* authority) {
  const size_t sep = endpoint.find("://");
  if (sep == std::string::npos) return absl::InvalidArgumentError("S3 endpoint " + endpoint + ": not scheme://host[:port]");
  *scheme = absl::AsciiStrToLower(endpoint.substr(0, sep));
  if (*scheme != "http" && *scheme != "https") {
    return absl::InvalidArgumentError("S3 endpoint " + endpoint + ": the scheme is neither http nor https");
  }
  std::string_view rest = std::string_view(endpoint).substr(sep + 3);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return absl::InvalidArgumentError("S3 endpoint " + endpoint + ": no host");
  for (char c : rest) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '[' &&
        c != ']') {
      return absl::InvalidArgumentError("S3 endpoint " + endpoint + ": only scheme://host[:port], without a path");
    }
  }
  *authority = rest;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<S3Loop>> S3Loop::Create(const S3ClientOptions& options) {
  std::string scheme, authority;
  if (absl::Status s = CheckEndpoint(options.endpoint, &scheme, &authority); !s.ok()) return s;
  if (options.bucket.empty() || options.bucket.size() > 255 ||
      !std::all_of(options.bucket.begin(), options.bucket.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
      })) {
    return absl::InvalidArgumentError("S3 bucket name '" + options.bucket + "': letters, digits, '.', '-', '_' only");
  }
  if (options.region.empty()) return absl::InvalidArgumentError("S3: no region");
  if (options.credentials.access_key_id.empty() || options.credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError("S3: no credentials (access key id and secret access key)");
  }
  if (options.max_in_flight == 0 || options.max_connections == 0 || options.max_attempts == 0) {
    return absl::InvalidArgumentError("S3: max_in_flight, max_connections and max_attempts must be at least 1");
  }
  if (!(options.connect_timeout_seconds > 0) || !(options.request_timeout_seconds > 0) ||
      !(options.retry_base_seconds >= 0) || !(options.retry_max_seconds >= options.retry_base_seconds)) {
    return absl::InvalidArgumentError("S3: timeouts must be positive and retry_base_seconds <= retry_max_seconds");
  }
  GlobalInit();
  std::string host = options.virtual_hosted ? options.bucket + "." + authority : authority;
  auto loop = std::unique_ptr<S3Loop>(new S3Loop(options, std::move(scheme), std::move(host)));
  if (loop->multi_ == nullptr) return absl::InternalError("S3: curl_multi_init failed");
  loop->thread_ = std::thread([raw = loop.get()] { raw->Run(); });
  return loop;
}

S3Loop::S3Loop(S3ClientOptions options, std::string scheme, std::string host)
    : options_(std::move(options)),
      scheme_(std::move(scheme)),
      host_(std::move(host)),
      key_{options_.credentials.access_key_id, options_.credentials.secret_access_key,
           options_.credentials.session_token, options_.region, "s3"},
      multi_(curl_multi_init()),
      rng_(std::random_device{}()) {
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(options_.max_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_connections));
  }
}

S3Loop::~S3Loop() {
  {
    absl::MutexLock lock(&mu_);
    stop_asked_ = true;
  }
  if (thread_.joinable()) {
    curl_multi_wakeup(multi_);
    thread_.join();
  }
  for (CURL* easy : idle_easies_) curl_easy_cleanup(easy);
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

void S3Loop::Post(absl::AnyInvocable<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(task));
  }
  curl_multi_wakeup(multi_);
}

bool S3Loop::RunPosted() {
  std::vector<absl::AnyInvocable<void()>> tasks;
  bool stop;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(posted_);
    stop = stop_asked_;
  }
  for (auto& task : tasks) task();
  return stop;
}

void S3Loop::Run() {
  NameThisThread("kvs-s3");
  for (;;) {
    if (RunPosted() && !stopping_) BeginStop();
    if (stopping_ && (exchanges_.empty() || NowNs() >= stop_deadline_ns_)) break;
    StartReady();
    int still_running = 0;
    curl_multi_perform(multi_, &still_running);
    Reap();
    StartReady();
    long wait_ms = 1000;
    curl_multi_timeout(multi_, &wait_ms);
    if (wait_ms < 0 || wait_ms > 1000) wait_ms = 1000;
    if (!backoff_.empty()) {
      const int64_t until = (backoff_.top().first - NowNs()) / 1'000'000 + 1;
      wait_ms = std::clamp<long>(static_cast<long>(until), 0, wait_ms);
    }
    if (stopping_) wait_ms = std::min<long>(wait_ms, 50);
    curl_multi_poll(multi_, nullptr, 0, static_cast<int>(wait_ms), nullptr);
  }
  // Past the drain: whatever is left is cancelled, and the tasks that come of it run.
  std::vector<uint64_t> left;
  for (const auto& [seq, ex] : exchanges_) left.push_back(seq);
  for (uint64_t seq : left) Cancel(seq);
  while (RunPosted(), true) {
    absl::MutexLock lock(&mu_);
    if (posted_.empty()) break;
  }
}

void S3Loop::BeginStop() {
  stopping_ = true;
  stop_deadline_ns_ = NowNs() + kDrainNs;
  std::vector<uint64_t> ids;
  for (const auto& [id, cancel] : operations_) ids.push_back(id);
  for (uint64_t id : ids) CancelOperation(id);
  std::vector<uint64_t> left;
  for (const auto& [seq, ex] : exchanges_) {
    if (!ex->internal) left.push_back(seq);
  }
  for (uint64_t seq : left) Cancel(seq);
}

void S3Loop::AddOperation(uint64_t id, absl::AnyInvocable<void()> cancel) {
  operations_.emplace(id, std::move(cancel));
}

void S3Loop::RemoveOperation(uint64_t id) { operations_.erase(id); }

void S3Loop::CancelOperation(uint64_t id) {
  auto it = operations_.find(id);
  if (it == operations_.end()) return;
  absl::AnyInvocable<void()> cancel = std::move(it->second);
  operations_.erase(it);
  cancel();
}

void S3Loop::Start(std::unique_ptr<S3Exchange> exchange) {
  S3Exchange& ex = *exchange;
  ex.seq = next_seq_++;
  ex.state = S3Exchange::State::kReady;
  exchanges_.emplace(ex.seq, std::move(exchange));
  if (stopping_ && !ex.internal) {
    // Not started: done comes from the loop, never from inside Start.
    Post([this, seq = ex.seq] { Cancel(seq); });
    return;
  }
  ready_.push_back(ex.seq);
}

void S3Loop::Cancel(uint64_t seq) {
  auto it = exchanges_.find(seq);
  if (it == exchanges_.end()) return;
  S3Exchange& ex = *it->second;
  if (ex.state == S3Exchange::State::kRunning) Release(ex);
  ex.result.outcome = S3Outcome::kCancelled;
  ex.result.message = "cancelled";
  Complete(seq);
}

void S3Loop::Complete(uint64_t seq) {
  auto it = exchanges_.find(seq);
  std::unique_ptr<S3Exchange> ex = std::move(it->second);
  exchanges_.erase(it);
  if (ex->done) ex->done(*ex);
}

void S3Loop::Release(S3Exchange& ex) {
  curl_multi_remove_handle(multi_, ex.easy);
  idle_easies_.push_back(ex.easy);
  ex.easy = nullptr;
  curl_slist_free_all(ex.header_list);
  ex.header_list = nullptr;
  --running_;
  in_flight_.store(running_, std::memory_order_relaxed);
}

void S3Loop::StartReady() {
  const int64_t now = NowNs();
  while (!backoff_.empty() && backoff_.top().first <= now) {
    const uint64_t seq = backoff_.top().second;
    backoff_.pop();
    auto it = exchanges_.find(seq);
    if (it == exchanges_.end() || it->second->state != S3Exchange::State::kBackoff) continue;
    it->second->state = S3Exchange::State::kReady;
    ready_.push_back(seq);
  }
  while (!ready_.empty() && running_ < options_.max_in_flight) {
    const uint64_t seq = ready_.front();
    ready_.pop_front();
    auto it = exchanges_.find(seq);
    if (it == exchanges_.end() || it->second->state != S3Exchange::State::kReady) continue;
    StartAttempt(*it->second);
  }
}

void S3Loop::StartAttempt(S3Exchange& ex) {
  CURL* easy;
  if (!idle_easies_.empty()) {
    easy = idle_easies_.back();
    idle_easies_.pop_back();
    curl_easy_reset(easy);
  } else if ((easy = curl_easy_init()) == nullptr) {
    ex.result.outcome = S3Outcome::kFailed;
    ex.result.message = "curl_easy_init failed";
    return Complete(ex.seq);
  }
  ex.easy = easy;
  ex.upload_offset = 0;
  ResetAnswer(ex);

  SigV4Request request{ex.method, ex.path, ex.query, ex.headers, ex.payload_sha256, /*query_slash_as_is=*/true};
  request.headers.emplace_back("host", host_);
  const SigV4Signed s = SignV4(request, key_, static_cast<int64_t>(std::time(nullptr)));
  curl_slist* list = nullptr;
  auto add = [&list](const std::string& name, const std::string& value) {
    list = curl_slist_append(list, (name + ": " + value).c_str());
  };
  for (const auto& [name, value] : request.headers) add(name, value);
  for (const auto& [name, value] : s.added_headers) add(name, value);
  add("Authorization", s.authorization);
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  list = curl_slist_append(list, "Accept:");
  ex.header_list = list;
  std::string url = scheme_ + "://" + host_ + s.encoded_path;
  if (!s.canonical_query.empty()) url += "?" + s.canonical_query;

  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PRIVATE, reinterpret_cast<void*>(static_cast<uintptr_t>(ex.seq)));
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);  // a key's "./" and "//" are the key's
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_PROXY, "");  // no proxy from the environment
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 256L << 10);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(options_.connect_timeout_seconds * 1e3)));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(std::ceil(options_.request_timeout_seconds * 1e3)));
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, ex.curl_error);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &TakeAnswerHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &ex);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &TakeAnswerBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &ex);
  if (scheme_ == "https") {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
    if (!options_.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (ex.method == "HEAD") {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else if (ex.method == "PUT" || ex.method == "POST") {
    curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy, CURLOPT_UPLOAD_BUFFERSIZE, 512L << 10);
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(ex.body_size));
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, &S3Loop::OnRead);
    curl_easy_setopt(easy, CURLOPT_READDATA, &ex);
    curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, &S3Loop::OnSeek);
    curl_easy_setopt(easy, CURLOPT_SEEKDATA, &ex);
    if (ex.method == "POST") curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "POST");
  } else if (ex.method != "GET") {
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, ex.method.c_str());
  }

  ex.state = S3Exchange::State::kRunning;
  ++ex.result.attempts;
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (ex.result.attempts > 1) retries_.fetch_add(1, std::memory_order_relaxed);
  ++running_;
  in_flight_.store(running_, std::memory_order_relaxed);
  if (const CURLMcode mc = curl_multi_add_handle(multi_, easy); mc != CURLM_OK) {
    Release(ex);
    ex.result.outcome = S3Outcome::kFailed;
    ex.result.message = absl::StrCat("curl_multi_add_handle: ", curl_multi_strerror(mc));
    Complete(ex.seq);
  }
}

void S3Loop::Reap() {
  // Taken first: a done callback may cancel other exchanges, which frees their messages.
  std::vector<std::pair<uint64_t, CURLcode>> finished;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    void* priv = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
    finished.emplace_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(priv)), msg->data.result);
  }
  for (const auto& [seq, code] : finished) {
    auto it = exchanges_.find(seq);
    if (it == exchanges_.end() || it->second->state != S3Exchange::State::kRunning) continue;
    FinishAttempt(*it->second, code);
  }
}

void S3Loop::FinishAttempt(S3Exchange& ex, CURLcode code) {
  long http = 0, connects = 0;
  curl_easy_getinfo(ex.easy, CURLINFO_RESPONSE_CODE, &http);
  curl_easy_getinfo(ex.easy, CURLINFO_NUM_CONNECTS, &connects);
  connects_.fetch_add(static_cast<uint64_t>(connects), std::memory_order_relaxed);
  Release(ex);
  ex.result.http_status = static_cast<int>(http);
  if (http != 0) answers_.fetch_add(1, std::memory_order_relaxed);
  bool retry = false;
  JudgeAnswer(ex, code, &retry);
  if (retry && ex.result.attempts < options_.max_attempts && !stopping_) {
    ex.state = S3Exchange::State::kBackoff;
    backoff_.emplace(NowNs() + BackoffNs(ex.result.attempts), ex.seq);
    return;
  }
  if (retry) absl::StrAppend(&ex.result.message, " (after ", ex.result.attempts, " attempts)");
  Complete(ex.seq);
}

int64_t S3Loop::BackoffNs(uint32_t attempts) {
  // Full jitter: uniform in [0, min(max, base * 2^(attempts - 1))].
  const double cap = std::min(options_.retry_max_seconds,
                              options_.retry_base_seconds * std::ldexp(1.0, static_cast<int>(std::min(attempts, 40u)) - 1));
  return static_cast<int64_t>(std::uniform_real_distribution<double>(0, cap)(rng_) * 1e9);
}

size_t S3Loop::OnRead(char* data, size_t size, size_t count, void* exchange) {
  auto& ex = *static_cast<S3Exchange*>(exchange);
  const size_t n = std::min(size * count, ex.body_size - ex.upload_offset);
  if (n > 0) std::memcpy(data, ex.body + ex.upload_offset, n);
  ex.upload_offset += n;
  return n;
}

int S3Loop::OnSeek(void* exchange, curl_off_t offset, int origin) {
  auto& ex = *static_cast<S3Exchange*>(exchange);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > ex.body_size) return CURL_SEEKFUNC_FAIL;
  ex.upload_offset = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

}  // namespace kvstream
