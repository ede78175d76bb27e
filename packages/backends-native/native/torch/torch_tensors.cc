#include "torch_tensors.h"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace galley {

namespace {
const std::unordered_map<std::string, c10::ScalarType>& Types() {
  static const std::unordered_map<std::string, c10::ScalarType> types = {
      {"BOOL", torch::kBool},     {"UINT8", torch::kUInt8},    {"INT8", torch::kInt8},
      {"INT16", torch::kInt16},   {"INT32", torch::kInt32},    {"INT64", torch::kInt64},
      {"FP16", torch::kFloat16},  {"BF16", torch::kBFloat16},  {"FP32", torch::kFloat32},
      {"FP64", torch::kFloat64},
  };
  return types;
}
}  // namespace

std::optional<c10::ScalarType> TorchType(const std::string& datatype) {
  auto it = Types().find(datatype);
  if (it == Types().end()) return std::nullopt;
  return it->second;
}

std::string ProtocolType(c10::ScalarType type) {
  for (const auto& [name, t] : Types()) {
    if (t == type) return name;
  }
  return "";
}

torch::Tensor WrapInput(const InputView& input) {
  auto options = torch::TensorOptions().dtype(input.type).device(torch::kCPU);
  size_t element = c10::elementSize(input.type);
  if (reinterpret_cast<uintptr_t>(input.data) % element == 0) {
    return torch::from_blob(input.data, input.shape, options);
  }
  // Bytes at an odd offset (inside a gRPC message): one copy into an aligned tensor.
  torch::Tensor copy = torch::empty(input.shape, options);
  std::memcpy(copy.data_ptr(), input.data, input.byte_length);
  return copy;
}

/** Outputs as one list of tensors: a tensor, or a tuple / list of tensors (Triton's `NAME__<i>` positions). */
std::vector<torch::Tensor> Flatten(const c10::IValue& result) {
  std::vector<torch::Tensor> outputs;
  auto element = [&outputs](const c10::IValue& value, size_t index) {
    if (!value.isTensor()) {
      throw std::invalid_argument("output at index " + std::to_string(index) + " must be of type Tensor, received " +
                                  value.type()->str());
    }
    outputs.push_back(value.toTensor());
  };
  if (result.isTensor()) {
    outputs.push_back(result.toTensor());
  } else if (result.isTuple()) {
    const auto& elements = result.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); i++) element(elements[i], i);
  } else if (result.isList()) {
    c10::List<c10::IValue> list = result.toList();
    for (size_t i = 0; i < list.size(); i++) element(list.get(i), i);
  } else {
    throw std::invalid_argument("output must be of type Tensor or a Tuple or List of Tensors, received " +
                                result.type()->str());
  }
  return outputs;
}

std::string Describe(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) return c10_error->what_without_backtrace();
  return error.what();
}

Napi::Uint8Array OwnedBytes(Napi::Env env, const torch::Tensor& tensor) {
  size_t bytes = tensor.nbytes();
  if (bytes == 0) return Napi::Uint8Array::New(env, 0);
  auto* holder = new torch::Tensor(tensor);
  Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(
      env, holder->data_ptr(), bytes,
      [](Napi::Env env, void*, torch::Tensor* held) {
        Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(held->nbytes()));
        delete held;
      },
      holder);
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(bytes));
  return Napi::Uint8Array::New(env, bytes, buffer, 0);
}

}  // namespace galley
