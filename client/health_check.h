// A client of the standard grpc.health.v1 service without generated code for it: the request
// for the whole server is the empty message and the response one varint field, so the generic
// stub is enough (Debian ships no generated C++ for health.proto).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

namespace tlp::client {

enum class Health { kUnreachable = -1, kUnknown = 0, kServing = 1, kNotServing = 2 };

Health CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                   std::chrono::milliseconds timeout = std::chrono::seconds(2));

}  // namespace tlp::client
