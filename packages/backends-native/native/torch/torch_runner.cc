#include "torch_runner.h"

#include "torch_tensors.h"

namespace galley {

namespace {

class ScriptRunner : public TorchRunner {
 public:
  explicit ScriptRunner(torch::jit::Module module) : module_(std::move(module)) {}
  std::vector<torch::Tensor> Forward(std::vector<c10::IValue> arguments, void*) override {
    return Flatten(module_.forward(std::move(arguments)));
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

std::unique_ptr<TorchRunner> LoadTorchScript(const std::string& path, const torch::Device& device, RunnerInfo& info) {
  torch::jit::Module module = torch::jit::load(path, device);
  module.eval();
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  const auto& arguments = schema.arguments();
  size_t first = !arguments.empty() && arguments[0].type()->kind() == c10::TypeKind::ClassType ? 1 : 0;
  for (size_t i = first; i < arguments.size(); i++) {
    info.arguments.emplace_back(arguments[i].name(), arguments[i].type()->str());
  }
  info.returns = schema.returns().empty() ? "None" : schema.returns()[0].type()->str();
  info.format = "torchscript";
  return std::make_unique<ScriptRunner>(std::move(module));
}

}  // namespace galley
