#include "client/health_check.h"

#include <grpcpp/generic/generic_stub.h>

#include <string>
#include <vector>

namespace tlp::client {

Health CheckHealth(const std::shared_ptr<grpc::Channel>& channel, std::chrono::milliseconds timeout,
                   const std::string& service) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::CompletionQueue queue;
  // HealthCheckRequest{service}: field 1 (tag 0x0a), its length, its bytes; "" encodes as none.
  std::string encoded;
  if (!service.empty()) {
    encoded.push_back(0x0a);
    encoded.push_back(static_cast<char>(service.size()));
    encoded += service;
  }
  grpc::Slice request_slice(encoded);
  grpc::ByteBuffer request(&request_slice, 1), response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &queue);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!status.ok()) return Health::kUnreachable;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return Health::kUnknown;
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  // HealthCheckResponse{status} is field 1, varint: 0x08 <status>; status 0 encodes as nothing.
  if (bytes.size() == 2 && bytes[0] == 0x08 && (bytes[1] == 1 || bytes[1] == 2)) {
    return static_cast<Health>(bytes[1]);
  }
  return Health::kUnknown;
}

}  // namespace tlp::client
