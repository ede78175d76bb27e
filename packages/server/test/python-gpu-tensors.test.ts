// GPU tensors in the Python backend (issue 50) on a machine without CUDA: Triton's
// FORCE_CPU_ONLY_INPUT_TENSORS parameter (its values, its log lines, its error), what a model sees
// of its inputs with it off (host tensors: `is_cpu()`, DLPack into torch on the same bytes), and
// Triton's errors when a model hands `Tensor.from_dlpack` memory the stub cannot share (on a GPU
// without CUDA here, another device type, a non-contiguous tensor). Real servers and stubs on port
// 0; the GPU side runs in backends-native/test/gpu/python-gpu-tensors.mjs.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";
import { cleanup, fp32Bytes, readFp32, recordingLog, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();
let libcuda: string | undefined;

beforeEach(() => {
  // However the machine is set up, the stubs find no CUDA driver.
  libcuda = process.env.GALLEY_LIBCUDA;
  process.env.GALLEY_LIBCUDA = "/nonexistent/libcuda.so.1";
});

afterEach(async () => {
  if (libcuda === undefined) delete process.env.GALLEY_LIBCUDA;
  else process.env.GALLEY_LIBCUDA = libcuda;
  await cleanup();
});

const MODEL = `
import ctypes
import numpy as np
import torch
import galley_cuda
import triton_python_backend_utils as pb_utils


class Fake:
    """Something with the DLPack protocol that says it lives on device (type, id)."""

    def __init__(self, device):
        self.device = device
        self.array = np.zeros(4, dtype=np.float32)

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def error_of(thunk):
    try:
        thunk()
    except pb_utils.TritonModelException as e:
        return e.message()
    return "no error"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            mode = request.parameters()
            checks = []
            checks.append("is_cpu=%s" % t.is_cpu())
            # DLPack into torch: the same bytes, no copy.
            x = torch.from_dlpack(t)
            checks.append("same=%s" % (x.data_ptr() == t.as_numpy().ctypes.data))
            y = torch.from_dlpack(t.to_dlpack()) * 2
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", y)
            checks.append("out_cpu=%s" % out.is_cpu())
            # Triton's errors for what cannot be shared.
            checks.append(error_of(lambda: pb_utils.Tensor.from_dlpack("X", Fake((2, 0)))))
            checks.append(error_of(lambda: pb_utils.Tensor.from_dlpack("X", Fake((4, 0)))))
            data = np.zeros(4, dtype=np.float32)
            capsule = galley_cuda.make_capsule(data.ctypes.data, galley_cuda.kDLCUDA, 0, "FP32", [4])
            checks.append(error_of(lambda: pb_utils.Tensor.from_dlpack("X", capsule)))
            strided = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
            checks.append(error_of(lambda: pb_utils.Tensor.from_dlpack("X", strided)))
            checks.append(error_of(lambda: pb_utils.Tensor.from_dlpack("X", torch.utils.dlpack.to_dlpack(strided))))
            responses.append(pb_utils.InferenceResponse([out], parameters={"checks": "|".join(checks)}))
        return responses
`;

function model(repo: string, name: string, force?: string): void {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  writeFileSync(
    join(folder, "config.pbtxt"),
    `name: "${name}"\nbackend: "python"\nmax_batch_size: 0\n` +
      `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n` +
      `output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n` +
      (force === undefined
        ? ""
        : `parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "${force}" } }\n`),
  );
  writeFileSync(join(folder, "1", "model.py"), MODEL);
}

const request = (name: string) => ({
  modelName: name,
  inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4n] }],
  rawInputContents: [fp32Bytes([1, 2, 3, 4])],
});

const GPU_UNAVAILABLE =
  "DLPack capsule passed pointer to memory allocated on GPU device,           when GPU is not available";

describe("GPU tensors in the Python backend, without CUDA", () => {
  it("reads FORCE_CPU_ONLY_INPUT_TENSORS as Triton does: yes, no, absent, or the load fails", async () => {
    const repo = tempRepository();
    model(repo, "force_default");
    model(repo, "force_yes", "yes");
    model(repo, "force_no", "no");
    model(repo, "force_bad", "maybe");
    const { log, lines } = recordingLog();
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python, log });
    expect(failedModels).toEqual(["force_bad"]);
    expect(lines.some((l) => l.includes("Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'"))).toBe(true);
    expect(lines.some((l) => l.includes("Forcing CPU only input tensors."))).toBe(true);
    expect(
      lines.some((l) => l.includes("Input tensors can be both in CPU and GPU. FORCE_CPU_ONLY_INPUT_TENSORS is off.")),
    ).toBe(true);
    // With it off, a stub without CUDA says so: inputs on a GPU would come as host copies.
    expect(
      lines.some(
        (l) =>
          l.includes("inputs on a GPU reach this model as host copies") &&
          l.includes("/nonexistent/libcuda.so.1) cannot be loaded"),
      ),
    ).toBe(true);
    for (const name of ["force_default", "force_yes", "force_no"]) {
      const reply = await client.modelInfer(request(name));
      expect(readFp32(reply.rawOutputContents[0])).toEqual([2, 4, 6, 8]);
      const checks = String(reply.parameters.checks?.parameterChoice.value).split("|");
      expect(checks).toEqual([
        "is_cpu=True",
        "same=True",
        "out_cpu=True",
        GPU_UNAVAILABLE,
        "DLDevice type 4 is not support by Python backend.",
        GPU_UNAVAILABLE,
        "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported.",
        "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported.",
      ]);
    }
  });
});
