// DaemonProcess: the real tlpd binary (TLPD_BINARY, defined by the test target) as a child
// process on loopback, for tests that kill, restart and probe it.
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/health_check.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::testing {

class DaemonProcess {
 public:
  // `model_args` say where the model comes from; by default the checkpoint in `dir`.
  // `file_size_limit` (bytes) caps every file the daemon writes: a full disk, as RocksDB sees it.
  DaemonProcess(const std::filesystem::path& dir, int port, int metrics_port,
                std::vector<std::string> model_args = {}, rlim_t file_size_limit = RLIM_INFINITY) {
    if (model_args.empty()) model_args = {"--checkpoint", (dir / "model.pt").string()};
    std::vector<std::string> args = {TLPD_BINARY,
                                     "serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--metrics-listen",
                                     "127.0.0.1:" + std::to_string(metrics_port),
                                     "--data-dir",
                                     (dir / "data").string(),
                                     "--no-sync",
                                     "--threads",
                                     "1"};
    args.insert(args.end(), model_args.begin(), model_args.end());
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = (dir / "tlpd.log").string();
      freopen(log.c_str(), "a", stderr);
      freopen(log.c_str(), "a", stdout);
      if (file_size_limit != RLIM_INFINITY) {
        const rlimit limit{file_size_limit, file_size_limit};
        setrlimit(RLIMIT_FSIZE, &limit);
        signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
      }
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(TLPD_BINARY, argv.data());
      _exit(127);
    }
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~DaemonProcess() { Kill(SIGKILL); }

  // Waits up to 60 s for health SERVING.
  bool WaitServing() {
    for (int i = 0; i < 600; ++i) {
      if (Health() == client::Health::kServing) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // service: "" = ready, "liveness" = the process is up (client/health_check.h).
  client::Health Health(const std::string& service = "") const {
    // A fresh channel per probe: one made before the daemon listened sits in gRPC's reconnect
    // backoff for seconds after it does.
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return client::CheckHealth(
        grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), arguments),
        std::chrono::seconds(2), service);
  }
  // Waits up to `limit` for the process to exit on its own; its status, or -1.
  int WaitExit(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  // Sends `signal` and returns the exit status.
  int Kill(int signal) {
    if (pid_ <= 0) return -1;
    kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }
  // A stub on a channel made once the daemon serves (see WaitServing).
  std::unique_ptr<tlp::v1::TemporalLinkPrediction::Stub> Stub() {
    return tlp::v1::TemporalLinkPrediction::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

 private:
  pid_t pid_ = 0;
  std::string address_;
};

}  // namespace tlp::testing
