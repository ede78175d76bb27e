// Protocol datatypes <-> libtorch scalar types, and input views over Node's bytes.
#pragma once

#include <napi.h>
#include <torch/script.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace galley {

struct ReadyEvent;

/** The libtorch type of a protocol datatype (BOOL, UINT8, INT8-64, FP16, BF16, FP32, FP64). */
std::optional<c10::ScalarType> TorchType(const std::string& datatype);

/** The protocol datatype of a libtorch type; empty when the protocol has none. */
std::string ProtocolType(c10::ScalarType type);

/**
 * One input of a batch, from one of: bytes owned by Node (kept alive by the caller until the batch
 * ends); device memory at `device_pointer` on GPU `device_id` (a CUDA shared-memory region, used in
 * place, after the writer's event `wait_event` where it has one); a tensor the addon kept (`resident`,
 * an earlier output); or `parts` to concatenate along
 * the first dimension (a batch of requests, on the instance's device).
 */
struct InputView {
  c10::ScalarType type;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t byte_length = 0;
  uintptr_t device_pointer = 0;
  int device_id = -1;
  std::optional<torch::Tensor> resident;
  /** A kept input's batch answered before its work ended: the event its bytes are complete after. */
  std::shared_ptr<ReadyEvent> resident_ready;
  /** Device memory another process wrote: the IPC handle (64 bytes) of its event recorded after that work. */
  std::string wait_event;
  std::vector<InputView> parts;
};

/** A CPU tensor over the input's bytes (no copy), or a copy when they are not aligned for the type. */
torch::Tensor WrapInput(const InputView& input);

/** Outputs as one list of tensors: a tensor, or a tuple / list of tensors (Triton's `NAME__<i>` positions). */
std::vector<torch::Tensor> Flatten(const c10::IValue& result);

/**
 * A host tensor's bytes as a Uint8Array over them (no copy): the ArrayBuffer holds the tensor
 * until it is collected, and counts as external memory meanwhile. `tensor` must be contiguous.
 */
Napi::Uint8Array OwnedBytes(Napi::Env env, const torch::Tensor& tensor);

/** libtorch's message for an error, without the C++ backtrace c10 errors carry. */
std::string Describe(const std::exception& error);

}  // namespace galley
