// What a libtorch instance runs: a TorchScript module (`model.pt`) or an AOTInductor package
// (`model.pt2`). The instance places inputs, stages and returns outputs the same way for both; a
// runner only loads the file and runs forward on tensors already on the instance's device.
#pragma once

#include <torch/script.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace galley {

/** What a load reports to JavaScript about the loaded model. */
struct RunnerInfo {
  /** "torchscript" or "aoti". */
  std::string format;
  /** TorchScript: forward's arguments (without self) as {name, type}, and its return type. */
  std::vector<std::pair<std::string, std::string>> arguments;
  std::string returns;
  /** AOTInductor: the package's call spec (inputs, outputs; PyTorch's pytree JSON) and metadata. */
  std::vector<std::string> call_spec;
  std::vector<std::pair<std::string, std::string>> metadata;
};

class TorchRunner {
 public:
  virtual ~TorchRunner() = default;
  /**
   * forward on `arguments` (on the instance's device), its returned tensors in order. `stream` is
   * the instance's CUDA stream (a cudaStream_t) or null on the CPU; the caller has made it current.
   */
  virtual std::vector<torch::Tensor> Forward(std::vector<c10::IValue> arguments, void* stream) = 0;
};

/** A TorchScript file (`torch.jit.save`), loaded onto `device`. */
std::unique_ptr<TorchRunner> LoadTorchScript(const std::string& path, const torch::Device& device, RunnerInfo& info);

/**
 * An AOTInductor package (`torch._inductor.aoti_compile_and_package`) for `device`. Throws a clear
 * message for a package made for another device kind or CPU, and where this libtorch has no
 * AOTInductor (Debian's 1.13).
 */
std::unique_ptr<TorchRunner> LoadAotiPackage(const std::string& path, const torch::Device& device, RunnerInfo& info);

/** Whether this build can load AOTInductor packages (libtorch 2.x with its package loader). */
bool AotiCompiled();

}  // namespace galley
