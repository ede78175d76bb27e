// CUDA graphs for a libtorch instance (the config's `optimization { cuda { graphs: true } }`):
// forward is captured once per distinct set of input shapes and replayed after, so a small model
// costs one graph launch instead of a kernel launch per operation (on the H200 a tiny denoiser's
// ~1 ms call was mostly launches). Only the instance's thread uses it.
#pragma once

#ifdef GALLEY_TORCH_CUDA

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/script.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "torch_runner.h"

namespace galley {

/** What a batch did with the graphs, for the caller's log and statistics. */
struct GraphOutcome {
  /** "" (ran eagerly), "captured" (this batch captured its graph) or "replayed". */
  std::string state;
  /** Why a capture failed (the batch then ran eagerly): libtorch's or CUDA's message. */
  std::string error;
};

class TorchGraphs {
 public:
  /** Eager runs of a shape before it is captured: TorchScript's profiling executor optimizes and
   *  compiles its fused kernels on the first runs of a shape, which must not happen mid-capture. */
  static constexpr int kWarmups = 3;
  /** Failed captures of a shape before it always runs eagerly. */
  static constexpr int kAttempts = 2;

  /** At most `limit` graphs (each holds its inputs, outputs and intermediates on the GPU). */
  explicit TorchGraphs(size_t limit) : limit_(limit) {}

  /**
   * Runs forward through the graph for these arguments' shapes when there is one (capturing it
   * when the shape has been seen often enough), setting `outputs` to the graph's own tensors
   * (overwritten by the next replay: the caller copies them out). Returns false when the batch
   * must run eagerly; `arguments` are then untouched.
   */
  bool Run(TorchRunner& runner, c10::cuda::CUDAStream& stream, const std::vector<c10::IValue>& arguments,
           std::vector<torch::Tensor>& outputs, GraphOutcome& outcome);

 private:
  struct Entry {
    int seen = 0;
    int failures = 0;
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<torch::Tensor> inputs;
    std::vector<torch::Tensor> outputs;
  };

  /** Captures the entry's graph from these arguments; false (the error in `outcome`) when it fails. */
  bool Capture(TorchRunner& runner, c10::cuda::CUDAStream& stream, const std::vector<c10::IValue>& arguments,
               Entry& entry, GraphOutcome& outcome);

  size_t limit_;
  size_t captured_ = 0;
  /** By the arguments' types and shapes; bounded (shapes past the bound run eagerly, uncounted). */
  std::map<std::string, Entry> entries_;
  /** One memory pool for all of the instance's graphs: they never run at the same time. */
  decltype(at::cuda::graph_pool_handle()) pool_{0, 0};
};

}  // namespace galley

#endif
