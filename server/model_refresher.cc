#include "server/model_refresher.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/thread_name.h"

namespace tlp::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "killed by signal " + std::to_string(WTERMSIG(wait_status));
  return "ended with status " + std::to_string(wait_status);
}

}  // namespace

ModelRefresher::ModelRefresher(Engine& engine, std::string data_dir, RefreshOptions options)
    : engine_(engine), data_dir_(std::move(data_dir)), options_(std::move(options)) {}

ModelRefresher::~ModelRefresher() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    if (child_ > 0) ::kill(child_, SIGTERM);
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void ModelRefresher::Start() {
  thread_ = std::thread([this] {
    NameThisThread("tlpd-refresh");
    Loop();
  });
}

Status ModelRefresher::RefreshNow() {
  if (engine_.GetModelStatus().phase != ModelLoadPhase::kIdle) {
    return Status::FailedPrecondition("a model load is running; refresh after it");
  }
  MutexLock lock(&mutex_);
  if (status_.running || requested_) {
    return Status::FailedPrecondition("a model refresh is running");
  }
  requested_ = true;
  wake_.SignalAll();
  return Status::Ok();
}

RefreshStatus ModelRefresher::GetStatus() const {
  MutexLock lock(&mutex_);
  RefreshStatus status = status_;
  status.running |= requested_;  // asked for, and about to start
  return status;
}

void ModelRefresher::Loop() {
  mutex_.Lock();
  uint64_t events_at_last = engine_.store().last_sequence();
  Clock::time_point time_at_last = Clock::now();
  while (!stopping_) {
    const uint64_t events = engine_.store().last_sequence();
    const bool due_events =
        options_.every_events > 0 && events - events_at_last >= options_.every_events;
    const bool due_time =
        options_.every_hours > 0 && events > events_at_last &&
        Clock::now() - time_at_last >= std::chrono::duration<double>(options_.every_hours * 3600);
    if (!requested_ && !due_events && !due_time) {
      // Triggers are checked once a second; without any, only RefreshNow or stopping wakes it.
      if (options_.every_events > 0 || options_.every_hours > 0) {
        wake_.WaitFor(&mutex_, std::chrono::seconds(1));
      } else {
        wake_.Wait(&mutex_);
      }
      continue;
    }
    requested_ = false;
    status_.running = true;
    events_at_last = events;
    time_at_last = Clock::now();
    RefreshStatus outcome = status_;
    mutex_.Unlock();
    const Clock::time_point start = Clock::now();
    Status status = RunOnce(&outcome);
    outcome.last_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!status.ok()) {
      outcome.last_outcome = "failed";
      outcome.last_error = status.ToString();
      spdlog::error("model refresh failed: {}", outcome.last_error);
    }
    mutex_.Lock();
    outcome.running = false;
    ++outcome.refreshes;
    if (outcome.last_outcome == "promoted") ++outcome.promotions;
    if (!status.ok()) ++outcome.failures;
    status_ = outcome;
  }
  mutex_.Unlock();
}

Status ModelRefresher::RunOnce(RefreshStatus* status) {
  const ModelStatus serving = engine_.GetModelStatus();
  if (serving.phase != ModelLoadPhase::kIdle) {
    return Status::FailedPrecondition("a model load is running");
  }
  const std::filesystem::path dir = std::filesystem::path(data_dir_) / "refresh";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::IoError("cannot create " + dir.string() + ": " + error.message());
  const std::string candidate = (dir / "candidate.pt").string();
  const std::string json_path = (dir / "refresh.json").string();
  const std::string log = (dir / "train.log").string();
  std::filesystem::remove(json_path, error);
  spdlog::info("model refresh: training {} afresh on the newest {} events ({})",
               serving.fingerprint,
               options_.window_events > 0 ? std::to_string(options_.window_events) : "all", log);
  Status result = RunTraining(serving.checkpoint, candidate, json_path, log);
  if (!result.ok()) return result;

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(std::ifstream(json_path));
    status->candidate_mrr = json.at("test").at("one_vs_all").at("mrr").get<double>();
    status->held_back_queries = json.at("test").at("one_vs_all").at("queries").get<uint64_t>();
    status->serving_mrr = json.at("compared").at("one_vs_all").at("mrr").get<double>();
    status->candidate_fingerprint = json.at("fingerprint").get<std::string>();
  } catch (const std::exception& what) {
    return Status::Internal("cannot read the training's results " + json_path + ": " + what.what());
  }
  status->serving_fingerprint = serving.fingerprint;
  status->last_error.clear();
  const bool better = status->candidate_mrr > status->serving_mrr + options_.min_gain;
  if (engine_.GetModelStatus().fingerprint != serving.fingerprint) {
    // Another model was loaded while this one trained; the comparison no longer holds.
    status->last_outcome = "kept";
    status->last_error = "the serving model changed during the refresh; not promoted";
  } else if (status->candidate_fingerprint == serving.fingerprint) {
    // Training is deterministic: the same window gives the same model.
    status->last_outcome = "kept";
    status->last_error = "the new model is the serving one (no new events in its window)";
  } else if (better) {
    Status load = engine_.LoadModel(candidate);
    if (!load.ok()) return Status(load.code(), "promoting the new model: " + load.message());
    status->last_outcome = "promoted";
  } else {
    status->last_outcome = "kept";
  }
  spdlog::info(
      "model refresh: new model {} one-vs-all MRR {:.4f}, serving model {} MRR {:.4f}, on the "
      "same {} held-back events (min gain {}): {}",
      status->candidate_fingerprint, status->candidate_mrr, status->serving_fingerprint,
      status->serving_mrr, status->held_back_queries, options_.min_gain,
      status->last_outcome == "promoted" ? "promoted (loading it)" : "kept the serving model");
  return Status::Ok();
}

Status ModelRefresher::RunTraining(const std::string& serving_checkpoint,
                                   const std::string& candidate, const std::string& json,
                                   const std::string& log) {
  std::vector<std::string> args = {options_.program,
                                   "train",
                                   "--from-store",
                                   data_dir_,
                                   "--config-from",
                                   serving_checkpoint,
                                   "--compare-checkpoint",
                                   serving_checkpoint,
                                   "--out",
                                   candidate,
                                   "--json-out",
                                   json,
                                   "--epochs",
                                   std::to_string(options_.epochs),
                                   "--threads",
                                   std::to_string(options_.threads),
                                   "--test-ranking-queries",
                                   std::to_string(options_.ranking_queries),
                                   "--mrr-queries",
                                   "0",
                                   "--no-probe"};
  if (options_.window_events > 0) {
    args.push_back("--last-events");
    args.push_back(std::to_string(options_.window_events));
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  MutexLock lock(&mutex_);
  if (stopping_) return Status::Unavailable("the daemon is stopping");
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::IoError("cannot open " + log + ": " + std::strerror(errno));
  const int nice = options_.nice;
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a threaded process: only async-signal-safe calls until exec. The daemon's
    // threads block its stop signals; the training must take SIGTERM, and die with the daemon.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + nice);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(log_fd);
  if (pid < 0)
    return Status::Internal(std::string("cannot start the training: ") + strerror(errno));
  child_ = pid;
  return AwaitTraining(pid, log);
}

Status ModelRefresher::AwaitTraining(pid_t pid, const std::string& log) {
  mutex_.Unlock();
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  mutex_.Lock();
  child_ = 0;
  if (stopping_) return Status::Unavailable("the daemon is stopping");
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return Status::Internal("the training " + Describe(wait_status) + "; see " + log);
  }
  return Status::Ok();
}

}  // namespace tlp::server
