/** Triton's platform, backend and default-file vocabulary (PROTOCOL.md §3.12, core `constants.h`). */
export const Platform = {
  tensorflowGraphdef: "tensorflow_graphdef",
  tensorflowSavedmodel: "tensorflow_savedmodel",
  tensorrtPlan: "tensorrt_plan",
  onnxruntimeOnnx: "onnxruntime_onnx",
  pytorchLibtorch: "pytorch_libtorch",
  libtorch: "libtorch",
  torchAoti: "torch_aoti",
  ensemble: "ensemble",
} as const;

/** Backends Triton knows by name; any other backend name is a custom backend. */
export const Backend = {
  tensorflow: "tensorflow",
  tensorrt: "tensorrt",
  onnxruntime: "onnxruntime",
  openvino: "openvino",
  pytorch: "pytorch",
  python: "python",
} as const;

/**
 * The backend each platform belongs to, for the platform/backend pair check. Backends missing
 * here (python, openvino, custom ones) accept any platform; `libtorch` belongs to no backend, so
 * `pytorch` + `libtorch` fails the check, as in Triton.
 */
export const PLATFORM_BACKEND: ReadonlyMap<string, string> = new Map([
  [Platform.tensorflowGraphdef, Backend.tensorflow],
  [Platform.tensorflowSavedmodel, Backend.tensorflow],
  [Platform.tensorrtPlan, Backend.tensorrt],
  [Platform.onnxruntimeOnnx, Backend.onnxruntime],
  [Platform.pytorchLibtorch, Backend.pytorch],
  [Platform.torchAoti, Backend.pytorch],
]);

/** Backends whose type is known to Triton's pair check. */
export const KNOWN_BACKEND_TYPES: ReadonlySet<string> = new Set([
  Backend.tensorflow,
  Backend.tensorrt,
  Backend.onnxruntime,
  Backend.pytorch,
]);
