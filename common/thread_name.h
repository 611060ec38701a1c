// NameThisThread: gives the calling thread a name that top -H, ps -L, perf and gdb show, so that
// an operator can tell which of the daemon's threads holds a core (the memory thread, the ingest
// writer, a node memory checkpoint) without a debugger. Linux keeps 15 characters.
#pragma once

#include <pthread.h>

#include <string>

namespace tlp {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace tlp
