// AOTInductor packages (`model.pt2`, Triton's `platform: "torch_aoti"`) through libtorch's
// AOTIModelPackageLoader. Only libtorch 2.x has it: against an older one (Debian's 1.13) this file
// builds a stub whose load says so.
#include <sys/utsname.h>
#include <torch/version.h>

#include <mutex>
#include <sstream>
#include <stdexcept>

#include "torch_runner.h"

#if TORCH_VERSION_MAJOR >= 2 && __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#define GALLEY_TORCH_AOTI 1
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace galley {

#ifdef GALLEY_TORCH_AOTI

namespace {

class AotiRunner : public TorchRunner {
 public:
  explicit AotiRunner(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader) : loader_(std::move(loader)) {}
  std::vector<torch::Tensor> Forward(std::vector<c10::IValue> arguments, void* stream) override {
    std::vector<torch::Tensor> inputs;
    inputs.reserve(arguments.size());
    for (c10::IValue& argument : arguments) inputs.push_back(std::move(argument).toTensor());
    return loader_->run(inputs, stream);
  }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
};

std::string Value(const std::unordered_map<std::string, std::string>& metadata, const std::string& key) {
  auto found = metadata.find(key);
  return found == metadata.end() ? std::string() : found->second;
}

/**
 * Refuse a CPU package whose kernels this processor cannot run (they were compiled for the
 * instruction set of the machine that made them, `-march=native`): running one would stop the
 * process with SIGILL, not fail a request.
 */
void CheckHost(const std::unordered_map<std::string, std::string>& metadata) {
  struct utsname host {};
  uname(&host);
  std::string machine = Value(metadata, "AOTI_MACHINE");
  if (!machine.empty() && machine != host.machine) {
    throw std::runtime_error("model.pt2 was compiled for " + machine + " processors; this one is " + host.machine);
  }
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  std::istringstream isa(Value(metadata, "AOTI_CPU_ISA"));
  std::string feature;
  while (isa >> feature) {
    bool supported = true;
    if (feature == "AVX512") {
      supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    } else if (feature == "AVX2") {
      supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    } else if (feature == "AVX512_VNNI") {
      supported = __builtin_cpu_supports("avx512vnni");
    }
    if (!supported) {
      throw std::runtime_error("model.pt2 was compiled for processors with " + feature +
                               " (AOTI_CPU_ISA '" + Value(metadata, "AOTI_CPU_ISA") +
                               "'), which this one lacks: compile it on the machine that serves it");
    }
  }
#endif
}

}  // namespace

bool AotiCompiled() { return true; }

std::unique_ptr<TorchRunner> LoadAotiPackage(const std::string& path, const torch::Device& device, RunnerInfo& info) {
  const std::string where = device.is_cuda() ? "a GPU (KIND_GPU)" : "the CPU (KIND_CPU)";
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  // One package load at a time in the process: two instances of a model loading the same package on
  // their threads at once made libtorch 2.13's loader fail now and then ("[json.exception.type_error.302]
  // type must be string, but is null", seen in CI with count: 2). Loads are rare; running waits nothing.
  static std::mutex loading;
  std::lock_guard<std::mutex> one_at_a_time(loading);
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, /*num_runners=*/1,
        device.is_cuda() ? device.index() : static_cast<c10::DeviceIndex>(-1));
  } catch (const c10::Error& error) {
    std::string message = error.what_without_backtrace();
    const std::string unsupported = "Unsupported device key found: ";
    auto at = message.find(unsupported);
    if (at != std::string::npos) {
      std::string key = message.substr(at + unsupported.size());
      while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
      throw std::runtime_error("model.pt2 was compiled for " + key + ", which this libtorch (" TORCH_VERSION
                               ") cannot run; this instance runs on " + where);
    }
    throw;
  }
  auto metadata = loader->get_metadata();
  std::string key = Value(metadata, "AOTI_DEVICE_KEY");
  std::string wanted = device.is_cuda() ? "cuda" : "cpu";
  if (key != wanted) {
    throw std::runtime_error("model.pt2 was compiled for " + (key.empty() ? std::string("an unknown device") : key) +
                             ", but this instance runs on " + where + ": compile the package for " + wanted +
                             " or change the instance group's kind");
  }
  if (!device.is_cuda()) CheckHost(metadata);
  info.format = "aoti";
  info.call_spec = loader->get_call_spec();
  for (const auto& [name, value] : metadata) info.metadata.emplace_back(name, value);
  return std::make_unique<AotiRunner>(std::move(loader));
}

#else

bool AotiCompiled() { return false; }

std::unique_ptr<TorchRunner> LoadAotiPackage(const std::string&, const torch::Device&, RunnerInfo&) {
  throw std::runtime_error("this libtorch (" TORCH_VERSION
                           ") has no AOTInductor support: torch_aoti models (model.pt2) need libtorch 2.x "
                           "(pip install torch, or LIBTORCH=/path/to/libtorch) and the addon rebuilt against it");
}

#endif

}  // namespace galley
