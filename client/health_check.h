// A client of the standard grpc.health.v1 service without generated code for it: the request
// for the whole server is the empty message and the response one varint field, so the generic
// stub is enough (Debian ships no generated C++ for health.proto).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

namespace tlp::client {

enum class Health { kUnreachable = -1, kUnknown = 0, kServing = 1, kNotServing = 2 };

// The health of `service`: "" is the whole server (tlpd: SERVING once it can take traffic,
// the readiness probe), "liveness" tlpd's process (SERVING from the moment it listens, while it
// trains its first model or replays its log too). Names must be shorter than 128 bytes.
Health CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                   std::chrono::milliseconds timeout = std::chrono::seconds(2),
                   const std::string& service = "");

}  // namespace tlp::client
