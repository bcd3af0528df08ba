#include "io/read_handle_cache.h"

#include <unistd.h>

namespace kvstream {

ReadHandleCache::~ReadHandleCache() {
  for (auto& [stem, e] : files_) close(e.handle.fd);
  for (auto& [fd, n] : doomed_) close(fd);
}

ReadHandleCache::Handle* ReadHandleCache::Find(const std::string& stem) {
  auto it = files_.find(stem);
  if (it == files_.end()) return nullptr;
  Entry& e = it->second;
  if (e.in_flight == 0) idle_lru_.splice(idle_lru_.end(), idle_lru_, e.lru);
  return &e.handle;
}

void ReadHandleCache::Insert(const std::string& stem, Handle handle) {
  Entry& e = files_[stem];
  e.handle = handle;
  e.in_flight = 0;
  e.lru = idle_lru_.insert(idle_lru_.end(), stem);
  stems_[handle.fd] = stem;
  Trim();
}

void ReadHandleCache::Drop(const std::string& stem) {
  auto it = files_.find(stem);
  if (it == files_.end()) return;
  Entry& e = it->second;
  stems_.erase(e.handle.fd);
  if (e.in_flight == 0) {
    idle_lru_.erase(e.lru);
    close(e.handle.fd);
  } else {
    doomed_[e.handle.fd] = e.in_flight;
  }
  files_.erase(it);
}

void ReadHandleCache::DropAll() {
  for (auto& [stem, e] : files_) {
    if (e.in_flight == 0) {
      close(e.handle.fd);
    } else {
      doomed_[e.handle.fd] = e.in_flight;
    }
  }
  files_.clear();
  stems_.clear();
  idle_lru_.clear();
}

const ReadHandleCache::Handle* ReadHandleCache::ByFd(int fd) const {
  auto s = stems_.find(fd);
  if (s == stems_.end()) return nullptr;
  auto f = files_.find(s->second);
  return f == files_.end() ? nullptr : &f->second.handle;
}

void ReadHandleCache::ReadIssued(int fd) {
  if (auto s = stems_.find(fd); s != stems_.end()) {
    Entry& e = files_[s->second];
    if (e.in_flight++ == 0) idle_lru_.erase(e.lru);
  } else if (auto d = doomed_.find(fd); d != doomed_.end()) {
    ++d->second;
  }
}

void ReadHandleCache::ReadLanded(int fd) {
  if (auto d = doomed_.find(fd); d != doomed_.end()) {
    if (--d->second == 0) {
      close(fd);
      doomed_.erase(d);
    }
    return;
  }
  auto s = stems_.find(fd);
  if (s == stems_.end()) return;
  Entry& e = files_[s->second];
  if (--e.in_flight == 0) {
    e.lru = idle_lru_.insert(idle_lru_.end(), s->second);
    Trim();
  }
}

void ReadHandleCache::Trim() {
  while (idle_lru_.size() > max_idle_) {
    auto it = files_.find(idle_lru_.front());
    idle_lru_.pop_front();
    stems_.erase(it->second.handle.fd);
    close(it->second.handle.fd);
    files_.erase(it);
  }
}

}  // namespace kvstream
