// Names the calling thread (at most 15 characters), so `top -H`, `perf` and `/proc/PID/task/*/comm`
// tell kvstreamd's threads apart: kvs-loop, kvs-verify, kvs-staging, kvs-data, ...
#pragma once

#include <pthread.h>

namespace kvstream {

inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace kvstream
