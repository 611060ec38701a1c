#include "model/checkpoint.h"

#include <cstdio>
#include <filesystem>

namespace tlp::model {
namespace {

// FNV-1a: a few lines, stable across platforms and library versions; a fingerprint needs no
// cryptographic strength, only to change when the bytes do.
uint64_t Fnv1a(const void* data, size_t size, uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

constexpr int64_t kFormatVersion = 1;

}  // namespace

std::string ConfigToJson(const ModelConfig& config) {
  char json[800];
  std::snprintf(
      json, sizeof(json),
      "{\"architecture\": \"%s\", \"memory_dim\": %lld, \"time_dim\": %lld, "
      "\"embedding_dim\": %lld, \"edge_feature_dim\": %lld, \"heads\": %lld, "
      "\"layers\": %lld, \"neighbors\": %lld, \"attention_p\": %.17g, \"dropout\": %.17g, "
      "\"pair_neighbors\": %lld, \"pair_hop_neighbors\": %lld, \"patch_size\": %lld, "
      "\"attention\": \"%s\", \"node_state\": %s, \"outcome_attention\": \"%s\"}",
      config.architecture.c_str(), static_cast<long long>(config.memory_dim),
      static_cast<long long>(config.time_dim), static_cast<long long>(config.embedding_dim),
      static_cast<long long>(config.edge_feature_dim), static_cast<long long>(config.heads),
      static_cast<long long>(config.layers), static_cast<long long>(config.neighbors),
      config.attention_p, config.dropout, static_cast<long long>(config.pair_neighbors),
      static_cast<long long>(config.pair_hop_neighbors), static_cast<long long>(config.patch_size),
      config.attention.c_str(), config.node_state ? "true" : "false",
      config.outcome_attention.c_str());
  return json;
}

std::string ModelFingerprint(TemporalLinkModel& model) {
  const std::string config = model->config().ToString();
  uint64_t hash = Fnv1a(config.data(), config.size(), 0xcbf29ce484222325ULL);
  for (const auto& named : model->named_parameters()) {
    const torch::Tensor cpu = named.value().detach().to(torch::kCPU).contiguous();
    hash = Fnv1a(named.key().data(), named.key().size(), hash);
    hash = Fnv1a(cpu.data_ptr(), cpu.numel() * cpu.element_size(), hash);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

Status SaveCheckpoint(const std::string& path, TemporalLinkModel& model) {
  const ModelConfig& config = model->config();
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format_version", c10::IValue(kFormatVersion));
    archive.write("config_json", c10::IValue(ConfigToJson(config)));
    archive.write("architecture", c10::IValue(config.architecture));
    archive.write("memory_dim", c10::IValue(config.memory_dim));
    archive.write("time_dim", c10::IValue(config.time_dim));
    archive.write("embedding_dim", c10::IValue(config.embedding_dim));
    archive.write("edge_feature_dim", c10::IValue(config.edge_feature_dim));
    archive.write("heads", c10::IValue(config.heads));
    archive.write("layers", c10::IValue(config.layers));
    archive.write("neighbors", c10::IValue(config.neighbors));
    archive.write("attention_p", c10::IValue(config.attention_p));
    archive.write("dropout", c10::IValue(config.dropout));
    archive.write("pair_neighbors", c10::IValue(config.pair_neighbors));
    archive.write("pair_hop_neighbors", c10::IValue(config.pair_hop_neighbors));
    archive.write("patch_size", c10::IValue(config.patch_size));
    archive.write("attention", c10::IValue(config.attention));
    archive.write("node_state", c10::IValue(config.node_state));
    archive.write("outcome_attention", c10::IValue(config.outcome_attention));
    archive.write("fingerprint", c10::IValue(ModelFingerprint(model)));
    torch::serialize::OutputArchive parameters;
    for (const auto& named : model->named_parameters()) {
      parameters.write(named.key(), named.value().detach().to(torch::kCPU));
    }
    archive.write("parameters", parameters);
    // Write then rename, so a crash never leaves a half-written checkpoint under `path`.
    const std::string temporary = path + ".tmp";
    archive.save_to(temporary);
    std::filesystem::rename(temporary, path);
  } catch (const std::exception& error) {
    return Status::IoError("cannot write checkpoint '" + path + "': " + error.what());
  }
  return Status::Ok();
}

Status LoadCheckpoint(const std::string& path, const torch::Device& device,
                      TemporalLinkModel* model) {
  if (!std::filesystem::exists(path)) return Status::NotFound("no checkpoint at '" + path + "'");
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    c10::IValue value;
    archive.read("format_version", value);
    if (value.toInt() != kFormatVersion) {
      return Status::FailedPrecondition("checkpoint '" + path + "' has format version " +
                                        std::to_string(value.toInt()) + ", this build reads " +
                                        std::to_string(kFormatVersion));
    }
    ModelConfig config;
    auto read_int = [&](const char* key, int64_t* out) {
      archive.read(key, value);
      *out = value.toInt();
    };
    archive.read("architecture", value);
    config.architecture = value.toStringRef();
    read_int("memory_dim", &config.memory_dim);
    read_int("time_dim", &config.time_dim);
    read_int("embedding_dim", &config.embedding_dim);
    read_int("edge_feature_dim", &config.edge_feature_dim);
    read_int("heads", &config.heads);
    read_int("layers", &config.layers);
    read_int("neighbors", &config.neighbors);
    archive.read("attention_p", value);
    config.attention_p = value.toDouble();
    archive.read("dropout", value);
    config.dropout = value.toDouble();
    // Absent from checkpoints made before pair evidence existed: those models have none.
    config.pair_neighbors = archive.try_read("pair_neighbors", value) ? value.toInt() : 0;
    config.pair_hop_neighbors = archive.try_read("pair_hop_neighbors", value) ? value.toInt() : 0;
    config.patch_size = archive.try_read("patch_size", value) ? value.toInt() : 1;
    config.attention = archive.try_read("attention", value) ? value.toStringRef() : "maa";
    // Absent from checkpoints made before the node-state outcome: links only.
    config.node_state = archive.try_read("node_state", value) && value.toBool();
    config.outcome_attention =
        archive.try_read("outcome_attention", value) ? value.toStringRef() : "shared";
    archive.read("fingerprint", value);
    const std::string stored_fingerprint = value.toStringRef();

    TemporalLinkModel loaded(config);
    torch::serialize::InputArchive parameters;
    archive.read("parameters", parameters);
    torch::NoGradGuard no_grad;
    for (auto& named : loaded->named_parameters()) {
      torch::Tensor stored;
      parameters.read(named.key(), stored);
      if (!stored.sizes().equals(named.value().sizes())) {
        return Status::Corruption("checkpoint '" + path + "': parameter " + named.key() +
                                  " has the wrong shape");
      }
      named.value().copy_(stored);
    }
    if (ModelFingerprint(loaded) != stored_fingerprint) {
      return Status::Corruption("checkpoint '" + path + "': fingerprint mismatch (file damaged?)");
    }
    loaded->to(device);
    loaded->ResetMemory();
    *model = loaded;
  } catch (const std::exception& error) {
    return Status::Corruption("cannot read checkpoint '" + path + "': " + error.what());
  }
  return Status::Ok();
}

Status LoadCheckpointExpecting(const std::string& path, const ModelConfig& expected,
                               const torch::Device& device, TemporalLinkModel* model) {
  TemporalLinkModel loaded{nullptr};
  Status status = LoadCheckpoint(path, device, &loaded);
  if (!status.ok()) return status;
  const ModelConfig& found = loaded->config();
  auto differ = [&](const char* name, const std::string& want, const std::string& have) {
    return Status::FailedPrecondition("checkpoint '" + path + "' is for another model: " + name +
                                      " is " + have + ", expected " + want);
  };
  if (found.architecture != expected.architecture) {
    return differ("architecture", expected.architecture, found.architecture);
  }
  if (found.memory_dim != expected.memory_dim) {
    return differ("memory_dim", std::to_string(expected.memory_dim),
                  std::to_string(found.memory_dim));
  }
  if (found.embedding_dim != expected.embedding_dim) {
    return differ("embedding_dim", std::to_string(expected.embedding_dim),
                  std::to_string(found.embedding_dim));
  }
  if (found.edge_feature_dim != expected.edge_feature_dim) {
    return differ("edge_feature_dim", std::to_string(expected.edge_feature_dim),
                  std::to_string(found.edge_feature_dim));
  }
  if (found.layers != expected.layers) {
    return differ("layers", std::to_string(expected.layers), std::to_string(found.layers));
  }
  *model = loaded;
  return Status::Ok();
}

torch::Device ResolveDevice(const std::string& requested, std::string* note) {
  if (requested.empty() || requested == "cpu") return torch::kCPU;
  if (requested.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      if (note)
        *note = "device '" + requested + "' requested but no CUDA device is available; using cpu";
      return torch::kCPU;
    }
    return torch::Device(requested);
  }
  if (note) *note = "unknown device '" + requested + "'; using cpu";
  return torch::kCPU;
}

}  // namespace tlp::model
