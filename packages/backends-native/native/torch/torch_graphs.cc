#include "torch_graphs.h"

#ifdef GALLEY_TORCH_CUDA

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <stdexcept>

#include "torch_tensors.h"

namespace galley {
namespace {

std::string Key(const std::vector<c10::IValue>& arguments) {
  std::string key;
  for (const c10::IValue& argument : arguments) {
    const torch::Tensor& tensor = argument.toTensor();
    key += c10::toString(tensor.scalar_type());
    for (int64_t size : tensor.sizes()) key += "," + std::to_string(size);
    key += ";";
  }
  return key;
}

/** Ends a capture a failure left open on the stream, so the stream runs work again. */
void AbandonCapture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
  }
  // A refused call during capture leaves its error behind; it must not fail the next check.
  cudaGetLastError();
}

}  // namespace

bool TorchGraphs::Run(TorchRunner& runner, c10::cuda::CUDAStream& stream,
                      const std::vector<c10::IValue>& arguments, std::vector<torch::Tensor>& outputs,
                      GraphOutcome& outcome) {
  for (const c10::IValue& argument : arguments) {
    if (!argument.isTensor() || !argument.toTensor().is_cuda()) return false;
  }
  std::string key = Key(arguments);
  auto found = entries_.find(key);
  if (found == entries_.end()) {
    // Shapes never captured are counted only while they might still be.
    if (captured_ >= limit_ || entries_.size() >= 4 * limit_ + 16) return false;
    found = entries_.emplace(std::move(key), Entry{}).first;
  }
  Entry& entry = found->second;
  if (entry.graph) {
    for (size_t i = 0; i < arguments.size(); i++) entry.inputs[i].copy_(arguments[i].toTensor(), /*non_blocking=*/true);
    entry.graph->replay();
    outputs = entry.outputs;
    outcome.state = "replayed";
    return true;
  }
  if (entry.failures >= kAttempts || captured_ >= limit_ || ++entry.seen <= kWarmups) return false;
  if (!Capture(runner, stream, arguments, entry, outcome)) return false;
  // A capture runs nothing: the batch's results come from the first replay.
  entry.graph->replay();
  outputs = entry.outputs;
  outcome.state = "captured";
  return true;
}

bool TorchGraphs::Capture(TorchRunner& runner, c10::cuda::CUDAStream& stream,
                          const std::vector<c10::IValue>& arguments, Entry& entry, GraphOutcome& outcome) {
  // The graph reads its inputs from, and writes its outputs to, tensors of its own; a replay
  // copies a batch's inputs into them first.
  std::vector<torch::Tensor> inputs;
  std::vector<c10::IValue> captured_arguments;
  for (const c10::IValue& argument : arguments) {
    inputs.push_back(argument.toTensor().clone(at::MemoryFormat::Contiguous));
    captured_arguments.emplace_back(inputs.back());
  }
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  std::vector<torch::Tensor> outputs;
  try {
    stream.synchronize();
    if (pool_.first == 0 && pool_.second == 0) pool_ = at::cuda::graph_pool_handle();
    // Thread-local: other instances' threads keep using the GPU while this one captures.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      outputs = runner.Forward(captured_arguments, stream.stream());
    } catch (...) {
      try {
        graph->capture_end();
      } catch (...) {
        // The capture was already invalid: the original error says why.
      }
      throw;
    }
    graph->capture_end();
    for (const torch::Tensor& output : outputs) {
      if (!output.is_cuda()) throw std::runtime_error("an output is not on the GPU, so a replay would not compute it");
    }
  } catch (const std::exception& error) {
    AbandonCapture(stream.stream());
    entry.failures++;
    entry.seen = 0;
    outcome.error = Describe(error);
    return false;
  } catch (...) {
    AbandonCapture(stream.stream());
    entry.failures++;
    entry.seen = 0;
    outcome.error = "unknown error while capturing a CUDA graph";
    return false;
  }
  entry.graph = std::move(graph);
  entry.inputs = std::move(inputs);
  entry.outputs = std::move(outputs);
  captured_++;
  return true;
}

}  // namespace galley

#endif
