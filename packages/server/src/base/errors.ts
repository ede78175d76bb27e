/** Triton's error codes (`TRITONSERVER_Error_Code`). */
export type TritonCode =
  | "UNKNOWN"
  | "INTERNAL"
  | "NOT_FOUND"
  | "INVALID_ARG"
  | "UNAVAILABLE"
  | "UNSUPPORTED"
  | "ALREADY_EXISTS"
  | "CANCELLED";

/**
 * Every error the server answers with: a stable id, Triton's code, Triton's message text
 * (`{name}` placeholders) and, for the few HTTP-only answers, the HTTP status when it is not the
 * code's (each frontend maps codes to its own statuses: `frontend/http/http-status.ts`,
 * `frontend/grpc/grpc-status.ts`). `docs/reference/errors.md` lists the same table; a test keeps them
 * in sync. Messages are Triton's where Triton has one, because clients match on them.
 */
export const ERRORS = {
  // Models and versions (PROTOCOL.md §4.6)
  MODEL_NOT_FOUND: ["NOT_FOUND", "Request for unknown model: '{model}' is not found"],
  MODEL_VERSION_NOT_FOUND: ["NOT_FOUND", "Request for unknown model: '{model}' version {version} is not found"],
  MODEL_NO_VERSIONS: ["NOT_FOUND", "Request for unknown model: '{model}' has no available versions"],
  MODEL_VERSION_NOT_READY: [
    "UNAVAILABLE",
    "Request for unknown model: '{model}' version {version} is not at ready state",
  ],
  BAD_VERSION: [
    "INVALID_ARG",
    "failed to get model version from specified version string '{version}' (details: stoll), version should be an integral value > 0",
  ],
  MODEL_NOT_READY_HTTP: ["INVALID_ARG", "Model version not ready"],
  // Loading on demand (`--load-on-demand`): Triton's words for a model with no ready version, and why.
  ON_DEMAND_LOAD_FAILED: [
    "UNAVAILABLE",
    "Request for unknown model: '{model}' has no available versions: loading it on demand failed: {detail}",
  ],
  ON_DEMAND_LOAD_TIMEOUT: [
    "UNAVAILABLE",
    "Request for unknown model: '{model}' has no available versions: still loading on demand after {ms} ms",
  ],
  STATS_MODEL_UNAVAILABLE: ["INVALID_ARG", "requested model '{model}' is not available"],

  // Inference request validation (PROTOCOL.md §1.3, §2.2)
  UNEXPECTED_INPUT: ["INVALID_ARG", "[request id: {id}] unexpected inference input '{input}' for model '{model}'"],
  UNEXPECTED_OUTPUT: ["INVALID_ARG", "[request id: {id}] unexpected inference output '{output}' for model '{model}'"],
  DUPLICATE_INPUT: ["INVALID_ARG", "[request id: {id}] input '{input}' already exists in request"],
  DUPLICATE_OUTPUT: ["INVALID_ARG", "[request id: {id}] output '{output}' already exists in request"],
  MISSING_INPUTS: [
    "INVALID_ARG",
    "[request id: {id}] expected {expected} inputs but got {got} inputs for model '{model}'. Got input(s) {given}, but missing required input(s) {missing}. Please provide all required input(s).",
  ],
  BATCH_TOO_LARGE: ["INVALID_ARG", "[request id: {id}] inference request batch-size must be <= {max} for '{model}'"],
  BATCH_MISMATCH: [
    "INVALID_ARG",
    "[request id: {id}] input '{input}' batch size does not match other inputs for '{model}'",
  ],
  UNEXPECTED_SHAPE: [
    "INVALID_ARG",
    "[request id: {id}] unexpected shape for input '{input}' for model '{model}'. Expected {expected}, got {got}.{note}",
  ],
  WRONG_DATATYPE: [
    "INVALID_ARG",
    "[request id: {id}] inference input '{input}' data-type is '{got}', but model '{model}' expects '{expected}'",
  ],
  BYTE_SIZE_MISMATCH: [
    "INVALID_ARG",
    "[request id: {id}] input byte size mismatch for input '{input}' for model '{model}'. Expected {expected}, got {got}",
  ],
  BAD_BYTES_INPUT: [
    "INVALID_ARG",
    "[request id: {id}] element byte size indicator exceeds the end of the buffer for input '{input}' for model '{model}'",
  ],
  BYTES_COUNT_MISMATCH: [
    "INVALID_ARG",
    "[request id: {id}] expected {expected} string elements for inference input '{input}' for model '{model}', got {got}",
  ],
  UNKNOWN_DATATYPE: ["INVALID_ARG", "[request id: {id}] invalid datatype '{datatype}' for input '{input}'"],
  RESERVED_PARAMETER: [
    "INVALID_ARG",
    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
  ],
  PARAMETER_VALUE_TYPE: ["INVALID_ARG", "invalid value type for '{name}' parameter"],
  BAD_PARAMETER: ["INVALID_ARG", "{message}"],

  // gRPC tensor contents (PROTOCOL.md §2.2)
  NO_INPUT_DATA: ["INVALID_ARG", "unable to find data for input tensor '{input}' for model '{model}' in request."],
  CONTENTS_WITH_RAW: [
    "INVALID_ARG",
    "contents field must not be specified when using raw_input_contents for '{input}' for model '{model}'",
  ],
  CONTENTS_WITH_SHM: [
    "INVALID_ARG",
    "unexpected 'content' provided when using shared memory for input tensor '{input}' for model '{model}'",
  ],
  WRONG_CONTENTS: [
    "INVALID_ARG",
    "unexpected explicit tensor data for input tensor '{input}' for model '{model}' of type '{got}', expected datatype '{expected}'",
  ],
  RAW_CONTENTS_COUNT: ["INVALID_ARG", "expected {expected} raw_input_contents, got {got} for model '{model}'"],
  GRPC_BAD_MESSAGE: ["INVALID_ARG", "unable to parse the {message} message: {detail}"],

  // HTTP request body (PROTOCOL.md §1.1, §1.5, §1.6)
  NOT_FOUND_ROUTE: ["NOT_FOUND", "Not Found"],
  METHOD_NOT_ALLOWED: ["INVALID_ARG", "Method Not Allowed", 405],
  BAD_JSON: ["INTERNAL", "failed to parse the request JSON buffer: {detail}"],
  JSON_FIELD: ["INTERNAL", "Unable to parse '{field}': {detail}"],
  JSON_DATA_TOO_FEW: ["INTERNAL", "Failed to parse 'data' field: shape does not match true shape"],
  JSON_DATA_TOO_MANY: ["INTERNAL", "Unable to parse 'data': Shape does not match true shape of 'data' field"],
  INPUT_DATA_CHOICE: [
    "INVALID_ARG",
    "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But {detail}",
  ],
  HEADER_LENGTH_REQUIRED: [
    "INVALID_ARG",
    "must specify valid 'Infer-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format",
  ],
  HEADER_LENGTH_RANGE: ["INVALID_ARG", "inference header size should be in range (0, {size}), got: {got}"],
  EXTRA_INPUT_DATA: ["INVALID_ARG", "unexpected additional input data for model '{model}'"],
  SHORT_INPUT_DATA: [
    "INVALID_ARG",
    "unexpected size for input '{input}', expecting {size} additional bytes for model '{model}'",
  ],
  JSON_HALF_INPUT: [
    "INVALID_ARG",
    "receiving {datatype} data via JSON is not supported. Please use the binary data format for input {input}",
  ],
  JSON_HALF_OUTPUT: [
    "INVALID_ARG",
    "sending {datatype} data via JSON is not supported. Please use the binary data format for output {output}",
  ],
  RAW_INPUT_COUNT: [
    "INVALID_ARG",
    "Raw request must only have 1 input (found 1) to be deduced but got {count} inputs in '{model}' model configuration",
  ],
  RAW_BYTES_SHAPE: ["INVALID_ARG", "For BYTE datatype raw input '{input}', the model must have input shape [1]"],
  RAW_VARIABLE_DIMS: [
    "INVALID_ARG",
    "The shape of the raw input '{input}' can not be deduced because there are more than one variable-sized dimension",
  ],
  RAW_SIZE: [
    "INVALID_ARG",
    "The shape of the raw input '{input}' can not be deduced: {size} bytes is not a whole number of elements of shape {shape}",
  ],
  UNSUPPORTED_COMPRESSION: ["UNSUPPORTED", "Unsupported compression type"],
  NOTHING_TO_DECOMPRESS: ["INVALID_ARG", "nothing to be decompressed"],
  JSON_ACCESS: ["INTERNAL", "{detail}"],
  PARAMETER_TYPE_HTTP: [
    "INVALID_ARG",
    "parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'.",
  ],
  OUTPUT_SHM_CONFLICT: ["INVALID_ARG", "Output can't set both 'shared_memory_region' and '{other}'"],
  OUTPUT_SIZE_MISMATCH: ["INTERNAL", "output tensor shape does not match size of output for '{output}'"],
  OUTPUT_BAD_DATATYPE: ["INTERNAL", "Invalid data type for output tensor"],
  LOAD_PARAMETER_HTTP: ["INTERNAL", "unexpected error on creating Triton parameter"],
  INPUT_SIZE_EXCEEDED: [
    "INVALID_ARG",
    "request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} bytes. Use --http-max-input-size to increase the limit.",
  ],
  JSON_INPUT_TOO_LARGE: [
    "INVALID_ARG",
    "JSON input '{input}' has a byte_size ({size} bytes) that exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit.",
  ],
  RAW_INPUT_TOO_LARGE: [
    "INVALID_ARG",
    "Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit.",
  ],
  DECOMPRESSED_TOO_LARGE: [
    "INVALID_ARG",
    "Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit.",
  ],
  JSON_TOO_DEEP: ["INVALID_ARG", "JSON nesting depth exceeds maximum allowed limit ({limit})"],
  ELEMENT_COUNT_OVERFLOW: [
    "INVALID_ARG",
    "shape {shape} of input '{input}' causes total element count to exceed maximum size of {max}",
  ],
  BYTE_SIZE_OVERFLOW: [
    "INVALID_ARG",
    "byte size overflow for input '{input}': {count} elements of {datatype} exceed the maximum size of {max} bytes",
  ],
  BODY_TOO_LARGE: [
    "INVALID_ARG",
    "request body of {size} bytes exceeds the maximum body size of {limit} bytes. Use --http-max-body-size to increase the limit.",
  ],
  DECOUPLED_HTTP: ["UNSUPPORTED", "HTTP end point doesn't support models with decoupled transaction policy"],
  DECOUPLED_INFER: [
    "UNSUPPORTED",
    "model '{model}' is decoupled: its responses can only be received as a stream (ModelStreamInfer, generate_stream, a streaming BLS call)",
  ],
  DECOUPLED_GRPC: ["UNSUPPORTED", "ModelInfer RPC doesn't support models with decoupled transaction policy"],
  RESTRICTED_HTTP: ["UNAVAILABLE", "This API is restricted, expecting header '{header}'", 403],
  RESTRICTED_GRPC: ["UNAVAILABLE", "This protocol is restricted, expecting header '{header}'"],

  // Scheduling (PROTOCOL.md §4.6, §9.3)
  QUEUE_FULL: ["UNAVAILABLE", "Exceeds maximum queue size"],
  QUEUE_TIMEOUT: ["UNAVAILABLE", "Request timeout expired"],
  GPU_MEMORY_SHORT: [
    "UNAVAILABLE",
    "not enough free GPU memory on GPU {device} for the batch within --gpu-memory-wait-secs",
  ],

  // Sequences (PROTOCOL.md §9.2)
  SEQUENCE_ID_REQUIRED: [
    "INVALID_ARG",
    "inference request to model '{model}' must specify a non-zero or non-empty correlation ID",
  ],
  SEQUENCE_BATCH_SIZE: [
    "INVALID_ARG",
    "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher",
  ],
  SEQUENCE_START_REQUIRED: [
    "INVALID_ARG",
    "inference request for sequence {id} to model '{model}' must specify the START flag on the first request of the sequence",
  ],
  SEQUENCE_ID_TYPE: ["INVALID_ARG", "sequence batching model '{model}' expects a {expected} correlation ID"],
  RESCHEDULE_UNSUPPORTED: [
    "INVALID_ARG",
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.",
  ],

  // Ensembles (PROTOCOL.md §4.4); the code is the failing step's
  ENSEMBLE_STEP_FAILED: ["INTERNAL", "in ensemble '{ensemble}', step {step} (model '{model}') failed: {message}"],

  // Classification (PROTOCOL.md §1.8)
  CLASSIFICATION_BAD_COUNT: ["INVALID_ARG", "classification count must be >= 0, got {count} for output '{output}'"],
  CLASSIFICATION_BYTES: ["INVALID_ARG", "class result not available for output due to unsupported type '{datatype}'"],

  // Model repository (PROTOCOL.md §5)
  REPOSITORY_NAME_UNSUPPORTED: ["UNSUPPORTED", "'repository_name' specification is not supported"],
  CONTROL_DISABLED: ["UNAVAILABLE", "explicit model load / unload is not allowed if polling is enabled"],
  LOAD_FAILED: ["INTERNAL", "failed to load '{model}', {detail}"],
  LOAD_FAILED_REASON: ["INVALID_ARG", "load failed for model '{model}': {detail}"],
  POLL_FAILED: ["INTERNAL", "failed to load '{model}', failed to poll from model repository"],
  MEMORY_BUDGET_FULL: ["UNAVAILABLE", "not enough room in --model-memory-budget {detail}"],
  BAD_LOAD_PARAMETER: ["INVALID_ARG", "Unrecognized load parameter '{name}' with type '{type}'"],
  BAD_CONFIG_OVERRIDE: ["INVALID_ARG", "Invalid config override: {detail}"],
  FILE_OVERRIDE_ESCAPES: [
    "INVALID_ARG",
    "Invalid file parameter '{name}' with normalized path '{path}' must stay within model directory.",
  ],
  FILE_OVERRIDE_DIRECTORY_IS_FILE: [
    "INVALID_ARG",
    "Invalid file parameter '{name}', directory has been created as a file",
  ],
  FILE_OVERRIDE_NEEDS_CONFIG: ["INVALID_ARG", "Load parameter 'config' must be specified for model file override"],
  MODEL_NAME_EMPTY: ["INVALID_ARG", "model name must not be empty"],
  MODEL_NAME_WHITESPACE: ["INVALID_ARG", "model name must not contain only whitespace characters"],
  MODEL_NAME_TRAVERSAL: [
    "INVALID_ARG",
    "invalid model name '{model}', model name must not contain path traversal characters",
  ],
  MODEL_UNLOADED_HTTP: ["UNAVAILABLE", "Model '{model}' is unloading"],
  BAD_INDEX_READY: ["INVALID_ARG", "Invalid value for 'ready': expected a boolean"],

  // Extensions owned by later issues, and settings
  SHM_DISABLED: [
    "UNSUPPORTED",
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.",
  ],
  SHM_EXISTS: ["ALREADY_EXISTS", "shared memory region '{name}' already in manager"],
  SHM_NOT_FOUND: ["NOT_FOUND", "Unable to find shared memory region: '{name}'"],
  SHM_STATUS_NOT_FOUND: ["NOT_FOUND", "Unable to find system shared memory region: '{name}'"],
  SHM_BAD_RANGE: ["INVALID_ARG", "Invalid offset + byte size for shared memory region: '{name}'"],
  SHM_BAD_OFFSET: ["INVALID_ARG", "Invalid offset for shared memory region: '{name}'"],
  SHM_OVERFLOW: [
    "INVALID_ARG",
    "Integer overflow detected: byte_size ({byteSize}) + offset ({offset}) exceeds maximum value ({max}) for region '{name}'",
  ],
  SHM_REGISTER_INVALID: ["INVALID_ARG", "failed to register shared memory region '{name}': invalid args"],
  SHM_RESERVED_KEY: [
    "INVALID_ARG",
    "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{prefix}'",
  ],
  SHM_OPEN_FAILED: ["INTERNAL", "Unable to open shared memory region: '{key}'"],
  SHM_EMPTY_KEY: ["INVALID_ARG", "cannot register shared memory region '{name}' - invalid shm key '{key}'"],
  SHM_INVALID_KEY: ["INVALID_ARG", "invalid shm key '{key}': a key is one name, optionally after '/'"],
  SHM_PARAMETER_TYPE: [
    "INVALID_ARG",
    "invalid value type for '{parameter}' parameter for tensor '{tensor}', expected {expected}.",
  ],
  SHM_PARAMETER_WITHOUT_REGION: [
    "INVALID_ARG",
    "'{parameter}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'",
  ],
  SHM_BYTE_SIZE_REQUIRED: [
    "INVALID_ARG",
    "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '{tensor}'",
  ],
  SHM_OUTPUT_TOO_SMALL: [
    "INTERNAL",
    "shared memory size specified with the request for output '{output}' ({given} bytes) should be at least {needed} bytes to hold the results",
  ],
  CUDA_SHM_NOT_SUPPORTED: ["INVALID_ARG", "failed to register CUDA shared memory region: '{name}', GPUs not supported"],
  CUDA_SHM_NO_RAW_HANDLE: ["INVALID_ARG", "Shared memory register request has no 'raw_handle' field"],
  CUDA_SHM_BAD_HANDLE: ["INVALID_ARG", "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"],
  CUDA_SHM_OPEN_FAILED: ["INVALID_ARG", "failed to register shared memory region: invalid args"],
  CUDA_SHM_CLOSE_FAILED: ["INTERNAL", "failed to close CUDA IPC handle: {detail}"],
  CUDA_SHM_STATUS_NOT_FOUND: ["NOT_FOUND", "Unable to find cuda shared memory region: '{name}'"],
  SHM_REGISTERED_AS_CUDA: [
    "NOT_FOUND",
    "The region named '{name}' is registered as CUDA shared memory, not system shared memory",
  ],
  SHM_REGISTERED_AS_SYSTEM: [
    "NOT_FOUND",
    "The region named '{name}' is registered as system shared memory, not CUDA shared memory",
  ],
  TRACE_UNKNOWN_MODEL: ["INVALID_ARG", "Request for unknown model : {model}"],
  TRACE_FILE_UNSUPPORTED: ["UNSUPPORTED", "trace file location can not be updated through network protocol"],
  BAD_TRACE_SETTING: ["INVALID_ARG", "{message}"],
  TRACE_SETTING_INVALID: ["INVALID_ARG", "Attempting to set invalid trace setting :{reason}"],
  SHM_REGION_NAME_REQUIRED: ["INVALID_ARG", "'region name' is necessary to register {kind} shared memory region"],
  LOG_FILE_UNSUPPORTED: ["UNSUPPORTED", "log file location can not be updated through network protocol"],
  BAD_LOG_SETTING: ["INVALID_ARG", "{message}"],
  BAD_LOG_FORMAT: ["UNAVAILABLE", "invalid argument for log_format, got: {format}"],

  // Lifecycle
  SHUTTING_DOWN_GRPC: ["UNAVAILABLE", "GRPC server is shutting down and has stopped accepting new requests."],
  SERVER_NOT_READY: ["UNAVAILABLE", "Server not ready"],
  CANCELLED: ["CANCELLED", "[request id: {id}] request cancelled"],
  BACKEND_FAILED: ["INTERNAL", "{message}"],
  BACKEND_NO_RESPONSE: ["INTERNAL", "backend returned no response"],
  // The videos API (`/v1/videos`, docs/guides/videos-api.md): answered in OpenAI's error shape.
  VIDEO_API_KEY: [
    "UNAVAILABLE",
    "Incorrect API key provided: send 'Authorization: Bearer <key>' with a key this server accepts",
    401,
  ],
  VIDEO_NOT_FOUND: ["NOT_FOUND", "No video found with id '{id}'"],
  VIDEO_MODEL_NOT_FOUND: ["NOT_FOUND", "The model '{model}' does not exist or is not served by the videos API"],
  VIDEO_INVALID: ["INVALID_ARG", "{message}"],
  VIDEO_QUEUE_FULL: ["UNAVAILABLE", "The video queue is full ({queued} jobs waiting); retry later", 429],
  VIDEO_IDEMPOTENCY_CONFLICT: [
    "INVALID_ARG",
    "Idempotency-Key '{key}' was already used for a different request (video '{id}')",
    409,
  ],
  VIDEO_NOT_READY: ["INVALID_ARG", "Video '{id}' is {status}: its {variant} is not available"],
  VIDEO_TOO_MANY_STREAMS: ["UNAVAILABLE", "Too many open event streams ({max}); retry later", 429],
  UNCLASSIFIED: ["INTERNAL", "{message}"],
  INTERNAL_ERROR: ["INTERNAL", "internal error: the request failed unexpectedly; the server log has the details"],
  MODEL_INSTANCE_RESTARTING: [
    "UNAVAILABLE",
    "model '{model}' is not available: its instance '{instance}' {reason}, and starts again in {ms} ms",
  ],

  // Outputs a backend produced: names checked against the model's config, tensors against themselves (backend/batch-io.ts)
  OUTPUT_UNKNOWN: ["INVALID_ARG", "unexpected inference output '{output}' for model '{model}'"],
  OUTPUT_UNKNOWN_DATATYPE: ["INTERNAL", "model '{model}' returned output '{output}' of unknown datatype '{datatype}'"],
  OUTPUT_BYTE_SIZE: [
    "INTERNAL",
    "model '{model}' returned output '{output}' with {bytes} bytes, but its shape [{shape}] of {datatype} needs {expected}",
  ],
  OUTPUT_ELEMENT_COUNT: [
    "INTERNAL",
    "model '{model}' returned BYTES output '{output}' with {count} elements, but its shape [{shape}] needs {expected}",
  ],
  OUTPUT_DUPLICATE: ["INTERNAL", "model '{model}' produced the output '{output}' more than once"],
  MODEL_BAD_RESPONSE: [
    "INTERNAL",
    "Failed to process the request(s) for model instance '{instance}', message: Expected a 'Response' object in the execute function return list, found type '{type}'.",
  ],

  // Tensors on their way into and out of a backend (backend/batch-io.ts, backend/onnxruntime)
  TENSOR_NO_TYPED_ARRAY: ["INTERNAL", "datatype {datatype} has no typed-array form"],
  BATCH_INPUT_UNBATCHABLE: ["INVALID_ARG", "input '{input}' cannot be batched across requests"],
  BATCH_OUTPUT_ROWS: ["INTERNAL", "output '{output}' has {rows} rows"],
  ORT_UNSUPPORTED_DATATYPE: ["UNSUPPORTED", "onnxruntime does not support {datatype} tensors (input '{input}')"],
  ORT_BYTES_NOT_UTF8: ["INVALID_ARG", "BYTES input '{input}' is not valid UTF-8; onnxruntime string tensors hold text"],

  // A scripted model's tensors (backend/js/js-tensors.ts): reading inputs, returning outputs
  JS_TENSOR_NO_TYPED_ARRAY: ["INTERNAL", "{datatype} tensor '{tensor}' has no typed-array form"],
  JS_TENSOR_NOT_BYTES: ["INTERNAL", "tensor '{tensor}' is {datatype}, not BYTES"],
  JS_TENSOR_ON_DEVICE: [
    "INTERNAL",
    "tensor '{tensor}' is held on GPU {device} (a BLS output asked with preferredMemory GPU): pass it to another call or return it; ask for CPU memory to read its bytes",
  ],
  JS_TENSOR_DIRECT_DEVICE: [
    "INVALID_ARG",
    "tensor '{tensor}' is held on GPU {device} by a direct BLS call: give it to another infer() call, or ask its call for CPU memory to return or stream its bytes",
  ],
  BLS_DEVICE_TENSOR_RELEASED: [
    "INVALID_ARG",
    "tensor '{tensor}' was held on GPU {device} by an earlier BLS call and has been released (the request that made the call ended)",
  ],
  BLS_DEVICE_TENSOR_MISMATCH: [
    "INVALID_ARG",
    "tensor '{tensor}' is held on GPU {device} as {held}; it cannot be passed as {given} (only its name may change)",
  ],
  BLS_DEVICE_TENSOR_SCALAR: ["INVALID_ARG", "tensor '{tensor}' is held on GPU {device} and has no rows to return"],
  JS_OUTPUT_UNKNOWN_DATATYPE: ["INVALID_ARG", "output '{output}' has unknown datatype '{datatype}'"],
  JS_OUTPUT_LIST: ["INVALID_ARG", "output '{output}' is {datatype}: give a typed array, not a list"],
  JS_OUTPUT_ELEMENT_COUNT: [
    "INVALID_ARG",
    "output '{output}' has {count} elements, its shape [{shape}] needs {expected}",
  ],
  JS_OUTPUT_BYTE_SIZE: [
    "INVALID_ARG",
    "output '{output}' has {bytes} bytes, its shape [{shape}] of {datatype} needs {expected}",
  ],

  // The PyTorch backend (backend/pytorch): a batch on its way into and out of libtorch
  TORCH_UNSUPPORTED_DATATYPE: ["UNSUPPORTED", "libtorch does not support {datatype} tensors (input '{input}')"],
  TORCH_INPUT_MISSING: ["INVALID_ARG", "no input for forward argument {index} ('{argument}') of model '{model}'"],
  TORCH_EXECUTE_FAILED: ["INTERNAL", "PyTorch execute failure: {message}"],
  TORCH_OUTPUT_INDEX: ["INVALID_ARG", "{message}"],
} as const satisfies Record<string, readonly [TritonCode, string] | readonly [TritonCode, string, number]>;

/**
 * The most characters of one value an error text shows (a model, tensor or region name, a request
 * id, a shape): a longer value is cut there and marked `...[<its length> characters]`. Clients
 * choose these strings; echoed whole, a 100 KB name made a gRPC status too large for the trailers
 * and the client saw INTERNAL (RST_STREAM) instead of the error. Triton's texts are unchanged for
 * anything shorter.
 */
export const ECHO_LIMIT = 256;

/**
 * The same bound for a value composed of others (`{message}`, `{detail}`, `{reason}`, `{note}`: a
 * backend's or a model's error, a parser's detail, another error's message; `{given}`,
 * `{missing}`: lists of names), which may hold a client's string too: long enough for any text
 * written for people.
 */
export const TEXT_ECHO_LIMIT = 4096;

const TEXT_VALUES: ReadonlySet<string> = new Set(["message", "detail", "reason", "note", "given", "missing"]);

/** A template value as an error text shows it: whole, or cut at its limit with a marker. */
function shown(key: string, value: string | number | bigint): string {
  const text = String(value);
  const limit = TEXT_VALUES.has(key) ? TEXT_ECHO_LIMIT : ECHO_LIMIT;
  if (text.length <= limit) return text;
  // Not between the two halves of a surrogate pair.
  const end = /[\uD800-\uDBFF]/.test(text.charAt(limit - 1)) ? limit - 1 : limit;
  return `${text.slice(0, end)}...[${text.length} characters]`;
}

/** A stable error id (see {@link ERRORS}). */
export type ErrorId = keyof typeof ERRORS;

/**
 * The one error class: an id from {@link ERRORS}, Triton's code, and the formatted message.
 * Frontends map `code` to an HTTP status or gRPC code; nothing else is sent to clients.
 */
export class InferenceError extends Error {
  override name = "InferenceError";
  readonly code: TritonCode;

  constructor(
    readonly id: ErrorId,
    values: Record<string, string | number | bigint> = {},
    /** `code` replaces the table's code where an error passes another one on (an ensemble step's). */
    options?: { cause?: unknown; code?: TritonCode },
  ) {
    const [code, template] = ERRORS[id];
    super(
      template.replace(/\{(\w+)\}/g, (_, key: string) =>
        key in values ? shown(key, values[key] as string | number | bigint) : `{${key}}`,
      ),
      options,
    );
    this.code = options?.code ?? code;
  }

  /** The HTTP status the table gives this error when it is not its code's (an HTTP-only answer). */
  get httpStatusOverride(): number | undefined {
    const entry: readonly unknown[] = ERRORS[this.id];
    return typeof entry[2] === "number" ? entry[2] : undefined;
  }
}

/**
 * Any thrown value as an {@link InferenceError}, keeping `cause`. An InferenceError stays as it is.
 * A plain `Error` carries a message written for people (Galley's own) and becomes UNCLASSIFIED
 * (INTERNAL) with that message; what a backend raised goes through {@link backendError} instead.
 * Anything else is a bug or a failure of the machine: the engine's TypeError, RangeError,
 * SyntaxError..., Node's errors with a code (they name files, offsets and system calls), a thrown
 * non-Error. It becomes INTERNAL_ERROR, whose message says nothing of it; frontends log it
 * ({@link hiddenCause}).
 */
export function toInferenceError(error: unknown): InferenceError {
  if (error instanceof InferenceError) return error;
  if (isPlainError(error)) return new InferenceError("UNCLASSIFIED", { message: error.message }, { cause: error });
  return new InferenceError("INTERNAL_ERROR", {}, { cause: error });
}

/**
 * What a backend raised (a model runtime's error, a model's own, its instance going away), as
 * {@link toInferenceError} but a plain `Error` becomes BACKEND_FAILED with its message (Triton
 * passes a backend's text on), counted as a backend failure in the statistics.
 */
export function backendError(error: unknown): InferenceError {
  if (isPlainError(error)) return new InferenceError("BACKEND_FAILED", { message: error.message }, { cause: error });
  return toInferenceError(error);
}

const TRITON_CODES: ReadonlySet<string> = new Set<TritonCode>([
  "UNKNOWN",
  "INTERNAL",
  "NOT_FOUND",
  "INVALID_ARG",
  "UNAVAILABLE",
  "UNSUPPORTED",
  "ALREADY_EXISTS",
  "CANCELLED",
]);

/**
 * A model's own error (a scripted or Python model's raised error or error response): its text as
 * BACKEND_FAILED, with the Triton code it named when that is one.
 */
export function modelError(message: string, code?: string): InferenceError {
  const named = code !== undefined && TRITON_CODES.has(code) ? { code: code as TritonCode } : {};
  return new InferenceError("BACKEND_FAILED", { message }, named);
}

/**
 * What an INTERNAL_ERROR hides from the client (its cause's stack, or the thrown value), for the
 * server log; undefined for any other error.
 */
export function hiddenCause(error: InferenceError): string | undefined {
  if (error.id !== "INTERNAL_ERROR") return undefined;
  const cause = error.cause;
  return cause instanceof Error ? (cause.stack ?? `${cause.name}: ${cause.message}`) : String(cause);
}

/**
 * A failure as the error a client is answered with, and what the log should say of it: the bug
 * behind an INTERNAL_ERROR, the stack of a plain error a frontend did not expect (both answered
 * without their JavaScript text), or undefined when the answer says it all.
 */
export function answerableFailure(error: unknown): { failed: InferenceError; logged: string | undefined } {
  const failed = toInferenceError(error);
  const logged =
    error instanceof InferenceError
      ? hiddenCause(failed)
      : error instanceof Error
        ? (error.stack ?? error.message)
        : String(error);
  return { failed, logged };
}

function isPlainError(error: unknown): error is Error {
  if (!(error instanceof Error) || Object.getPrototypeOf(error) !== Error.prototype) return false;
  const code = (error as NodeJS.ErrnoException).code;
  return !(typeof code === "string" && /^(E[A-Z0-9]+|ERR_\w+)$/.test(code));
}

/** Triton's request-id prefix value: the id, or `<id_unknown>`. */
export function requestId(id: string): string {
  return id === "" ? "<id_unknown>" : id;
}
