// Helpers shared by the tests that talk to a daemon over loopback.
#pragma once

#include <string>

namespace tlp::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();
// A bundled data file: $TLP_SOURCE_DIR/data/<name> (ctest sets it), else ./data/<name>.
std::string BundledData(const std::string& name);
// GET http://127.0.0.1:port/path with HTTP/1.0; the whole response, or "" when unreachable.
std::string HttpGet(int port, const std::string& path);
}  // namespace tlp::testing
