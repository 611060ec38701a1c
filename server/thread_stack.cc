// Minimum stack size for threads created through pthread_attr_setstacksize.
//
// Debian's civetweb (inside prometheus-cpp's Exposer) asks for 100 KiB thread stacks. glibc
// carves the static TLS of every loaded library out of each thread's stack, and with LibTorch,
// glog and OpenBLAS loaded that exceeds 100 KiB, so thread creation fails with EINVAL and the
// Exposer throws "null context when constructing CivetServer". No option of civetweb or
// prometheus-cpp changes that size, so we interpose the call and raise small requests to
// 1 MiB. The executable exports this symbol (see server/CMakeLists.txt), which makes the
// dynamic linker bind civetweb's call to it.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attributes, size_t size) {
  constexpr size_t kMinimumStack = size_t{1} << 20;
  using Function = int (*)(pthread_attr_t*, size_t);
  static const auto real =
      reinterpret_cast<Function>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attributes, size < kMinimumStack ? kMinimumStack : size);
}
