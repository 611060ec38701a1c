// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's thread-safety
// annotations, so members can say which lock guards them (ABSL_GUARDED_BY) and clang's
// -Wthread-safety checks every access (scripts/thread_safety_check.sh).
//
// Why not absl::Mutex, which carries the same annotations: ThreadSanitizer sees through pthread
// locks but not through Debian's abseil, which is built without TSan instrumentation, so every
// hand-over under an absl::Mutex reads as a race in the TSan suites. std::mutex alone is not
// annotated in libstdc++. The same wrapper as LevelDB's port::Mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace tlp {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mutex_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mutex_.unlock(); }
  // Tells the analysis the caller holds it (checked by nothing at run time).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mutex_;
};

// Holds `mutex` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mutex) ABSL_EXCLUSIVE_LOCK_FUNCTION(mutex) : mutex_(mutex) {
    mutex_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mutex_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mutex_;
};

// Waiting is written as `while (!condition) cv.Wait(&mutex);` at the call site rather than with
// a predicate lambda: the analysis checks a lambda's body as a function of its own, without the
// caller's lock.
class CondVar {
 public:
  // Releases `mutex` while it waits; holds it again on return (spurious wake-ups included).
  void Wait(Mutex* mutex) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    std::unique_lock lock(mutex->mutex_, std::adopt_lock);
    condition_.wait(lock);
    lock.release();
  }
  // Like Wait, returning after `timeout` at the latest.
  template <typename Rep, typename Period>
  void WaitFor(Mutex* mutex, std::chrono::duration<Rep, Period> timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    std::unique_lock lock(mutex->mutex_, std::adopt_lock);
    condition_.wait_for(lock, timeout);
    lock.release();
  }
  void Signal() { condition_.notify_one(); }
  void SignalAll() { condition_.notify_all(); }

 private:
  std::condition_variable condition_;
};

}  // namespace tlp
