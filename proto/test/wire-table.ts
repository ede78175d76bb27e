// Transcribed from shared/PROTOCOL.md §2.1, §2.2, §3 and §8.2 (Triton's grpc_service.proto,
// model_config.proto and health.proto). One line per field: `name = number : type`.
// Message and enum types are fully qualified.

const I = "inference";
const T = (name: string) => `${I}.${name}`;
const DT = T("DataType");
const PARAM_MAP = `map<string, ${T("InferParameter")}>`;
const DURATION = T("StatisticDuration");

export const messageTable: Record<string, string[]> = {
  // §2.1 — health, metadata, configuration
  [T("ServerLiveRequest")]: [],
  [T("ServerLiveResponse")]: ["live = 1 : bool"],
  [T("ServerReadyRequest")]: [],
  [T("ServerReadyResponse")]: ["ready = 1 : bool"],
  [T("ModelReadyRequest")]: ["name = 1 : string", "version = 2 : string"],
  [T("ModelReadyResponse")]: ["ready = 1 : bool"],
  [T("ServerMetadataRequest")]: [],
  [T("ServerMetadataResponse")]: ["name = 1 : string", "version = 2 : string", "extensions = 3 : repeated string"],
  [T("ModelMetadataRequest")]: ["name = 1 : string", "version = 2 : string"],
  [T("ModelMetadataResponse")]: [
    "name = 1 : string",
    "versions = 2 : repeated string",
    "platform = 3 : string",
    `inputs = 4 : repeated ${T("ModelMetadataResponse.TensorMetadata")}`,
    `outputs = 5 : repeated ${T("ModelMetadataResponse.TensorMetadata")}`,
  ],
  [T("ModelMetadataResponse.TensorMetadata")]: [
    "name = 1 : string",
    "datatype = 2 : string",
    "shape = 3 : repeated int64",
  ],
  [T("ModelConfigRequest")]: ["name = 1 : string", "version = 2 : string"],
  [T("ModelConfigResponse")]: [`config = 1 : ${T("ModelConfig")}`],

  // §2.2 — inference
  [T("InferParameter")]: [
    "bool_param = 1 : bool",
    "int64_param = 2 : int64",
    "string_param = 3 : string",
    "double_param = 4 : double",
    "uint64_param = 5 : uint64",
  ],
  [T("InferTensorContents")]: [
    "bool_contents = 1 : repeated bool",
    "int_contents = 2 : repeated int32",
    "int64_contents = 3 : repeated int64",
    "uint_contents = 4 : repeated uint32",
    "uint64_contents = 5 : repeated uint64",
    "fp32_contents = 6 : repeated float",
    "fp64_contents = 7 : repeated double",
    "bytes_contents = 8 : repeated bytes",
  ],
  [T("ModelInferRequest")]: [
    "model_name = 1 : string",
    "model_version = 2 : string",
    "id = 3 : string",
    `parameters = 4 : ${PARAM_MAP}`,
    `inputs = 5 : repeated ${T("ModelInferRequest.InferInputTensor")}`,
    `outputs = 6 : repeated ${T("ModelInferRequest.InferRequestedOutputTensor")}`,
    "raw_input_contents = 7 : repeated bytes",
  ],
  [T("ModelInferRequest.InferInputTensor")]: [
    "name = 1 : string",
    "datatype = 2 : string",
    "shape = 3 : repeated int64",
    `parameters = 4 : ${PARAM_MAP}`,
    `contents = 5 : ${T("InferTensorContents")}`,
  ],
  [T("ModelInferRequest.InferRequestedOutputTensor")]: ["name = 1 : string", `parameters = 2 : ${PARAM_MAP}`],
  [T("ModelInferResponse")]: [
    "model_name = 1 : string",
    "model_version = 2 : string",
    "id = 3 : string",
    `parameters = 4 : ${PARAM_MAP}`,
    `outputs = 5 : repeated ${T("ModelInferResponse.InferOutputTensor")}`,
    "raw_output_contents = 6 : repeated bytes",
  ],
  [T("ModelInferResponse.InferOutputTensor")]: [
    "name = 1 : string",
    "datatype = 2 : string",
    "shape = 3 : repeated int64",
    `parameters = 4 : ${PARAM_MAP}`,
    `contents = 5 : ${T("InferTensorContents")}`,
  ],
  [T("ModelStreamInferResponse")]: ["error_message = 1 : string", `infer_response = 2 : ${T("ModelInferResponse")}`],

  // §8.2 — statistics
  [T("ModelStatisticsRequest")]: ["name = 1 : string", "version = 2 : string"],
  [T("StatisticDuration")]: ["count = 1 : uint64", "ns = 2 : uint64"],
  [T("InferStatistics")]: [
    `success = 1 : ${DURATION}`,
    `fail = 2 : ${DURATION}`,
    `queue = 3 : ${DURATION}`,
    `compute_input = 4 : ${DURATION}`,
    `compute_infer = 5 : ${DURATION}`,
    `compute_output = 6 : ${DURATION}`,
    `cache_hit = 7 : ${DURATION}`,
    `cache_miss = 8 : ${DURATION}`,
  ],
  [T("InferResponseStatistics")]: [
    `compute_infer = 1 : ${DURATION}`,
    `compute_output = 2 : ${DURATION}`,
    `success = 3 : ${DURATION}`,
    `fail = 4 : ${DURATION}`,
    `empty_response = 5 : ${DURATION}`,
    `cancel = 6 : ${DURATION}`,
  ],
  [T("InferBatchStatistics")]: [
    "batch_size = 1 : uint64",
    `compute_input = 2 : ${DURATION}`,
    `compute_infer = 3 : ${DURATION}`,
    `compute_output = 4 : ${DURATION}`,
  ],
  [T("MemoryUsage")]: ["type = 1 : string", "id = 2 : int64", "byte_size = 3 : uint64"],
  [T("ModelStatistics")]: [
    "name = 1 : string",
    "version = 2 : string",
    "last_inference = 3 : uint64",
    "inference_count = 4 : uint64",
    "execution_count = 5 : uint64",
    `inference_stats = 6 : ${T("InferStatistics")}`,
    `batch_stats = 7 : repeated ${T("InferBatchStatistics")}`,
    `memory_usage = 8 : repeated ${T("MemoryUsage")}`,
    `response_stats = 9 : map<string, ${T("InferResponseStatistics")}>`,
  ],
  [T("ModelStatisticsResponse")]: [`model_stats = 1 : repeated ${T("ModelStatistics")}`],

  // §2.1 — repository
  [T("ModelRepositoryParameter")]: [
    "bool_param = 1 : bool",
    "int64_param = 2 : int64",
    "string_param = 3 : string",
    "bytes_param = 4 : bytes",
  ],
  [T("RepositoryIndexRequest")]: ["repository_name = 1 : string", "ready = 2 : bool"],
  [T("RepositoryIndexResponse")]: [`models = 1 : repeated ${T("RepositoryIndexResponse.ModelIndex")}`],
  [T("RepositoryIndexResponse.ModelIndex")]: [
    "name = 1 : string",
    "version = 2 : string",
    "state = 3 : string",
    "reason = 4 : string",
  ],
  [T("RepositoryModelLoadRequest")]: [
    "repository_name = 1 : string",
    "model_name = 2 : string",
    `parameters = 3 : map<string, ${T("ModelRepositoryParameter")}>`,
  ],
  [T("RepositoryModelLoadResponse")]: [],
  [T("RepositoryModelUnloadRequest")]: [
    "repository_name = 1 : string",
    "model_name = 2 : string",
    `parameters = 3 : map<string, ${T("ModelRepositoryParameter")}>`,
  ],
  [T("RepositoryModelUnloadResponse")]: [],

  // §2.1 — shared memory
  [T("SystemSharedMemoryStatusRequest")]: ["name = 1 : string"],
  [T("SystemSharedMemoryStatusResponse")]: [
    `regions = 1 : map<string, ${T("SystemSharedMemoryStatusResponse.RegionStatus")}>`,
  ],
  [T("SystemSharedMemoryStatusResponse.RegionStatus")]: [
    "name = 1 : string",
    "key = 2 : string",
    "offset = 3 : uint64",
    "byte_size = 4 : uint64",
  ],
  [T("SystemSharedMemoryRegisterRequest")]: [
    "name = 1 : string",
    "key = 2 : string",
    "offset = 3 : uint64",
    "byte_size = 4 : uint64",
  ],
  [T("SystemSharedMemoryRegisterResponse")]: [],
  [T("SystemSharedMemoryUnregisterRequest")]: ["name = 1 : string"],
  [T("SystemSharedMemoryUnregisterResponse")]: [],
  [T("CudaSharedMemoryStatusRequest")]: ["name = 1 : string"],
  [T("CudaSharedMemoryStatusResponse")]: [
    `regions = 1 : map<string, ${T("CudaSharedMemoryStatusResponse.RegionStatus")}>`,
  ],
  [T("CudaSharedMemoryStatusResponse.RegionStatus")]: [
    "name = 1 : string",
    "device_id = 2 : uint64",
    "byte_size = 3 : uint64",
  ],
  [T("CudaSharedMemoryRegisterRequest")]: [
    "name = 1 : string",
    "raw_handle = 2 : bytes",
    "device_id = 3 : int64",
    "byte_size = 4 : uint64",
  ],
  [T("CudaSharedMemoryRegisterResponse")]: [],
  [T("CudaSharedMemoryUnregisterRequest")]: ["name = 1 : string"],
  [T("CudaSharedMemoryUnregisterResponse")]: [],

  // §2.1 — trace and log settings
  [T("TraceSettingRequest")]: [
    `settings = 1 : map<string, ${T("TraceSettingRequest.SettingValue")}>`,
    "model_name = 2 : string",
  ],
  [T("TraceSettingRequest.SettingValue")]: ["value = 1 : repeated string"],
  [T("TraceSettingResponse")]: [`settings = 1 : map<string, ${T("TraceSettingResponse.SettingValue")}>`],
  [T("TraceSettingResponse.SettingValue")]: ["value = 1 : repeated string"],
  [T("LogSettingsRequest")]: [`settings = 1 : map<string, ${T("LogSettingsRequest.SettingValue")}>`],
  [T("LogSettingsRequest.SettingValue")]: [
    "bool_param = 1 : bool",
    "uint32_param = 2 : uint32",
    "string_param = 3 : string",
  ],
  [T("LogSettingsResponse")]: [`settings = 1 : map<string, ${T("LogSettingsResponse.SettingValue")}>`],
  [T("LogSettingsResponse.SettingValue")]: [
    "bool_param = 1 : bool",
    "uint32_param = 2 : uint32",
    "string_param = 3 : string",
  ],

  // §3.1 — ModelConfig
  [T("ModelConfig")]: [
    "name = 1 : string",
    "platform = 2 : string",
    "backend = 17 : string",
    "runtime = 25 : string",
    `version_policy = 3 : ${T("ModelVersionPolicy")}`,
    "max_batch_size = 4 : int32",
    `input = 5 : repeated ${T("ModelInput")}`,
    `output = 6 : repeated ${T("ModelOutput")}`,
    `batch_input = 20 : repeated ${T("BatchInput")}`,
    `batch_output = 21 : repeated ${T("BatchOutput")}`,
    `optimization = 12 : ${T("ModelOptimizationPolicy")}`,
    `dynamic_batching = 11 : ${T("ModelDynamicBatching")}`,
    `sequence_batching = 13 : ${T("ModelSequenceBatching")}`,
    `ensemble_scheduling = 15 : ${T("ModelEnsembling")}`,
    `instance_group = 7 : repeated ${T("ModelInstanceGroup")}`,
    "default_model_filename = 8 : string",
    "cc_model_filenames = 9 : map<string, string>",
    "metric_tags = 10 : map<string, string>",
    `parameters = 14 : map<string, ${T("ModelParameter")}>`,
    `model_warmup = 16 : repeated ${T("ModelWarmup")}`,
    `model_operations = 18 : ${T("ModelOperations")}`,
    `model_transaction_policy = 19 : ${T("ModelTransactionPolicy")}`,
    `model_repository_agents = 23 : ${T("ModelRepositoryAgents")}`,
    `response_cache = 24 : ${T("ModelResponseCache")}`,
    `model_metrics = 26 : ${T("ModelMetrics")}`,
  ],
  [T("ModelOperations")]: ["op_library_filename = 1 : repeated string"],
  [T("ModelTransactionPolicy")]: ["decoupled = 1 : bool"],
  [T("ModelRepositoryAgents")]: [`agents = 1 : repeated ${T("ModelRepositoryAgents.Agent")}`],
  [T("ModelRepositoryAgents.Agent")]: ["name = 1 : string", "parameters = 2 : map<string, string>"],
  [T("ModelResponseCache")]: ["enable = 1 : bool"],
  [T("ModelParameter")]: ["string_value = 1 : string"],
  [T("ModelMetrics")]: [`metric_control = 1 : repeated ${T("ModelMetrics.MetricControl")}`],
  [T("ModelMetrics.MetricControl")]: [
    `metric_identifier = 1 : ${T("ModelMetrics.MetricControl.MetricIdentifier")}`,
    `histogram_options = 2 : ${T("ModelMetrics.MetricControl.HistogramOptions")}`,
  ],
  [T("ModelMetrics.MetricControl.MetricIdentifier")]: ["family = 1 : string"],
  [T("ModelMetrics.MetricControl.HistogramOptions")]: ["buckets = 1 : repeated double"],

  // §3.3 — inputs and outputs
  [T("ModelInput")]: [
    "name = 1 : string",
    `data_type = 2 : ${DT}`,
    `format = 3 : ${T("ModelInput.Format")}`,
    "dims = 4 : repeated int64",
    `reshape = 5 : ${T("ModelTensorReshape")}`,
    "is_shape_tensor = 6 : bool",
    "allow_ragged_batch = 7 : bool",
    "optional = 8 : bool",
    "is_non_linear_format_io = 9 : bool",
  ],
  [T("ModelOutput")]: [
    "name = 1 : string",
    `data_type = 2 : ${DT}`,
    "dims = 3 : repeated int64",
    `reshape = 5 : ${T("ModelTensorReshape")}`,
    "label_filename = 4 : string",
    "is_shape_tensor = 6 : bool",
    "is_non_linear_format_io = 7 : bool",
  ],
  [T("ModelTensorReshape")]: ["shape = 1 : repeated int64"],
  [T("BatchInput")]: [
    `kind = 1 : ${T("BatchInput.Kind")}`,
    "target_name = 2 : repeated string",
    `data_type = 3 : ${DT}`,
    "source_input = 4 : repeated string",
  ],
  [T("BatchOutput")]: [
    "target_name = 1 : repeated string",
    `kind = 2 : ${T("BatchOutput.Kind")}`,
    "source_input = 3 : repeated string",
  ],

  // §3.4 — instance groups
  [T("ModelInstanceGroup")]: [
    "name = 1 : string",
    `kind = 4 : ${T("ModelInstanceGroup.Kind")}`,
    "count = 2 : int32",
    `rate_limiter = 6 : ${T("ModelRateLimiter")}`,
    "gpus = 3 : repeated int32",
    `secondary_devices = 8 : repeated ${T("ModelInstanceGroup.SecondaryDevice")}`,
    "profile = 5 : repeated string",
    "passive = 7 : bool",
    "host_policy = 9 : string",
  ],
  [T("ModelInstanceGroup.SecondaryDevice")]: [
    `kind = 1 : ${T("ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind")}`,
    "device_id = 2 : int64",
  ],
  [T("ModelRateLimiter")]: [`resources = 1 : repeated ${T("ModelRateLimiter.Resource")}`, "priority = 2 : uint32"],
  [T("ModelRateLimiter.Resource")]: ["name = 1 : string", "global = 2 : bool", "count = 3 : uint32"],

  // §3.5 — version policy
  [T("ModelVersionPolicy")]: [
    `latest = 1 : ${T("ModelVersionPolicy.Latest")}`,
    `all = 2 : ${T("ModelVersionPolicy.All")}`,
    `specific = 3 : ${T("ModelVersionPolicy.Specific")}`,
  ],
  [T("ModelVersionPolicy.Latest")]: ["num_versions = 1 : uint32"],
  [T("ModelVersionPolicy.All")]: [],
  [T("ModelVersionPolicy.Specific")]: ["versions = 1 : repeated int64"],

  // §3.6 — dynamic batching
  [T("ModelDynamicBatching")]: [
    "preferred_batch_size = 1 : repeated int32",
    "max_queue_delay_microseconds = 2 : uint64",
    "preserve_ordering = 3 : bool",
    "priority_levels = 4 : uint64",
    "default_priority_level = 5 : uint64",
    `default_queue_policy = 6 : ${T("ModelQueuePolicy")}`,
    `priority_queue_policy = 7 : map<uint64, ${T("ModelQueuePolicy")}>`,
  ],
  [T("ModelQueuePolicy")]: [
    `timeout_action = 1 : ${T("ModelQueuePolicy.TimeoutAction")}`,
    "default_timeout_microseconds = 2 : uint64",
    "allow_timeout_override = 3 : bool",
    "max_queue_size = 4 : uint32",
  ],

  // §3.7 — sequence batching
  [T("ModelSequenceBatching")]: [
    `direct = 3 : ${T("ModelSequenceBatching.StrategyDirect")}`,
    `oldest = 4 : ${T("ModelSequenceBatching.StrategyOldest")}`,
    "max_sequence_idle_microseconds = 1 : uint64",
    `control_input = 2 : repeated ${T("ModelSequenceBatching.ControlInput")}`,
    `state = 5 : repeated ${T("ModelSequenceBatching.State")}`,
    "iterative_sequence = 6 : bool",
  ],
  [T("ModelSequenceBatching.StrategyDirect")]: [
    "max_queue_delay_microseconds = 1 : uint64",
    "minimum_slot_utilization = 2 : float",
  ],
  [T("ModelSequenceBatching.StrategyOldest")]: [
    "max_candidate_sequences = 1 : int32",
    "preferred_batch_size = 2 : repeated int32",
    "max_queue_delay_microseconds = 3 : uint64",
    "preserve_ordering = 4 : bool",
  ],
  [T("ModelSequenceBatching.ControlInput")]: [
    "name = 1 : string",
    `control = 2 : repeated ${T("ModelSequenceBatching.Control")}`,
  ],
  [T("ModelSequenceBatching.Control")]: [
    `kind = 1 : ${T("ModelSequenceBatching.Control.Kind")}`,
    "int32_false_true = 2 : repeated int32",
    "fp32_false_true = 3 : repeated float",
    "bool_false_true = 5 : repeated bool",
    `data_type = 4 : ${DT}`,
  ],
  [T("ModelSequenceBatching.State")]: [
    "input_name = 1 : string",
    "output_name = 2 : string",
    `data_type = 3 : ${DT}`,
    "dims = 4 : repeated int64",
    `initial_state = 5 : repeated ${T("ModelSequenceBatching.InitialState")}`,
    "use_same_buffer_for_input_output = 6 : bool",
    "use_growable_memory = 7 : bool",
  ],
  [T("ModelSequenceBatching.InitialState")]: [
    `data_type = 1 : ${DT}`,
    "dims = 2 : repeated int64",
    "zero_data = 3 : bool",
    "data_file = 4 : string",
    "name = 5 : string",
  ],

  // §3.8 — ensembles
  [T("ModelEnsembling")]: [`step = 1 : repeated ${T("ModelEnsembling.Step")}`, "max_inflight_requests = 2 : uint32"],
  [T("ModelEnsembling.Step")]: [
    "model_name = 1 : string",
    "model_version = 2 : int64",
    "input_map = 3 : map<string, string>",
    "output_map = 4 : map<string, string>",
    "model_namespace = 5 : string",
  ],

  // §3.9 — optimization
  [T("ModelOptimizationPolicy")]: [
    `graph = 1 : ${T("ModelOptimizationPolicy.Graph")}`,
    `priority = 2 : ${T("ModelOptimizationPolicy.ModelPriority")}`,
    `cuda = 3 : ${T("ModelOptimizationPolicy.Cuda")}`,
    `execution_accelerators = 4 : ${T("ModelOptimizationPolicy.ExecutionAccelerators")}`,
    `input_pinned_memory = 5 : ${T("ModelOptimizationPolicy.PinnedMemoryBuffer")}`,
    `output_pinned_memory = 6 : ${T("ModelOptimizationPolicy.PinnedMemoryBuffer")}`,
    "gather_kernel_buffer_threshold = 7 : uint32",
    "eager_batching = 8 : bool",
  ],
  [T("ModelOptimizationPolicy.Graph")]: ["level = 1 : int32"],
  [T("ModelOptimizationPolicy.Cuda")]: [
    "graphs = 1 : bool",
    "busy_wait_events = 2 : bool",
    `graph_spec = 3 : repeated ${T("ModelOptimizationPolicy.Cuda.GraphSpec")}`,
    "output_copy_stream = 4 : bool",
  ],
  [T("ModelOptimizationPolicy.Cuda.GraphSpec")]: [
    "batch_size = 1 : int32",
    `input = 2 : map<string, ${T("ModelOptimizationPolicy.Cuda.GraphSpec.Shape")}>`,
    `graph_lower_bound = 3 : ${T("ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound")}`,
  ],
  [T("ModelOptimizationPolicy.Cuda.GraphSpec.Shape")]: ["dim = 1 : repeated int64"],
  [T("ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound")]: [
    "batch_size = 1 : int32",
    `input = 2 : map<string, ${T("ModelOptimizationPolicy.Cuda.GraphSpec.Shape")}>`,
  ],
  [T("ModelOptimizationPolicy.ExecutionAccelerators")]: [
    `gpu_execution_accelerator = 1 : repeated ${T("ModelOptimizationPolicy.ExecutionAccelerators.Accelerator")}`,
    `cpu_execution_accelerator = 2 : repeated ${T("ModelOptimizationPolicy.ExecutionAccelerators.Accelerator")}`,
  ],
  [T("ModelOptimizationPolicy.ExecutionAccelerators.Accelerator")]: [
    "name = 1 : string",
    "parameters = 2 : map<string, string>",
  ],
  [T("ModelOptimizationPolicy.PinnedMemoryBuffer")]: ["enable = 1 : bool"],

  // §3.10 — warmup
  [T("ModelWarmup")]: [
    "name = 1 : string",
    "batch_size = 2 : uint32",
    `inputs = 3 : map<string, ${T("ModelWarmup.Input")}>`,
    "count = 4 : uint32",
  ],
  [T("ModelWarmup.Input")]: [
    `data_type = 1 : ${DT}`,
    "dims = 2 : repeated int64",
    "zero_data = 3 : bool",
    "random_data = 4 : bool",
    "input_data_file = 5 : string",
  ],

  // §2 — gRPC health
  "grpc.health.v1.HealthCheckRequest": ["service = 1 : string"],
  "grpc.health.v1.HealthCheckResponse": ["status = 1 : grpc.health.v1.HealthCheckResponse.ServingStatus"],
};

/** Oneof name → member fields, for every message that has a oneof. */
export const oneofTable: Record<string, Record<string, string[]>> = {
  [T("InferParameter")]: {
    parameter_choice: ["bool_param", "int64_param", "string_param", "double_param", "uint64_param"],
  },
  [T("ModelRepositoryParameter")]: { parameter_choice: ["bool_param", "int64_param", "string_param", "bytes_param"] },
  [T("LogSettingsRequest.SettingValue")]: { parameter_choice: ["bool_param", "uint32_param", "string_param"] },
  [T("LogSettingsResponse.SettingValue")]: { parameter_choice: ["bool_param", "uint32_param", "string_param"] },
  [T("ModelConfig")]: { scheduling_choice: ["dynamic_batching", "sequence_batching", "ensemble_scheduling"] },
  [T("ModelVersionPolicy")]: { policy_choice: ["latest", "all", "specific"] },
  [T("ModelSequenceBatching")]: { strategy_choice: ["direct", "oldest"] },
  [T("ModelSequenceBatching.InitialState")]: { state_data: ["zero_data", "data_file"] },
  [T("ModelWarmup.Input")]: { input_data_type: ["zero_data", "random_data", "input_data_file"] },
  [T("ModelMetrics.MetricControl")]: { metric_options: ["histogram_options"] },
};

export const enumTable: Record<string, string[]> = {
  // §3.2
  [DT]: [
    "TYPE_INVALID = 0",
    "TYPE_BOOL = 1",
    "TYPE_UINT8 = 2",
    "TYPE_UINT16 = 3",
    "TYPE_UINT32 = 4",
    "TYPE_UINT64 = 5",
    "TYPE_INT8 = 6",
    "TYPE_INT16 = 7",
    "TYPE_INT32 = 8",
    "TYPE_INT64 = 9",
    "TYPE_FP16 = 10",
    "TYPE_FP32 = 11",
    "TYPE_FP64 = 12",
    "TYPE_STRING = 13",
    "TYPE_BF16 = 14",
  ],
  [T("ModelInput.Format")]: ["FORMAT_NONE = 0", "FORMAT_NHWC = 1", "FORMAT_NCHW = 2"],
  [T("BatchInput.Kind")]: [
    "BATCH_ELEMENT_COUNT = 0",
    "BATCH_ACCUMULATED_ELEMENT_COUNT = 1",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO = 2",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE = 3",
    "BATCH_ITEM_SHAPE = 4",
    "BATCH_ITEM_SHAPE_FLATTEN = 5",
  ],
  [T("BatchOutput.Kind")]: ["BATCH_SCATTER_WITH_INPUT_SHAPE = 0"],
  [T("ModelInstanceGroup.Kind")]: ["KIND_AUTO = 0", "KIND_GPU = 1", "KIND_CPU = 2", "KIND_MODEL = 3"],
  [T("ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind")]: ["KIND_NVDLA = 0"],
  [T("ModelOptimizationPolicy.ModelPriority")]: ["PRIORITY_DEFAULT = 0", "PRIORITY_MAX = 1", "PRIORITY_MIN = 2"],
  [T("ModelQueuePolicy.TimeoutAction")]: ["REJECT = 0", "DELAY = 1"],
  [T("ModelSequenceBatching.Control.Kind")]: [
    "CONTROL_SEQUENCE_START = 0",
    "CONTROL_SEQUENCE_READY = 1",
    "CONTROL_SEQUENCE_END = 2",
    "CONTROL_SEQUENCE_CORRID = 3",
  ],
  "grpc.health.v1.HealthCheckResponse.ServingStatus": [
    "UNKNOWN = 0",
    "SERVING = 1",
    "NOT_SERVING = 2",
    "SERVICE_UNKNOWN = 3",
  ],
};

/** RPC name → [kind, request type, response type] (§2.1), all in package `inference`. */
export const rpcTable: Record<string, [string, string, string]> = {
  ServerLive: ["unary", "ServerLiveRequest", "ServerLiveResponse"],
  ServerReady: ["unary", "ServerReadyRequest", "ServerReadyResponse"],
  ModelReady: ["unary", "ModelReadyRequest", "ModelReadyResponse"],
  ServerMetadata: ["unary", "ServerMetadataRequest", "ServerMetadataResponse"],
  ModelMetadata: ["unary", "ModelMetadataRequest", "ModelMetadataResponse"],
  ModelInfer: ["unary", "ModelInferRequest", "ModelInferResponse"],
  ModelStreamInfer: ["bidi_streaming", "ModelInferRequest", "ModelStreamInferResponse"],
  ModelConfig: ["unary", "ModelConfigRequest", "ModelConfigResponse"],
  ModelStatistics: ["unary", "ModelStatisticsRequest", "ModelStatisticsResponse"],
  RepositoryIndex: ["unary", "RepositoryIndexRequest", "RepositoryIndexResponse"],
  RepositoryModelLoad: ["unary", "RepositoryModelLoadRequest", "RepositoryModelLoadResponse"],
  RepositoryModelUnload: ["unary", "RepositoryModelUnloadRequest", "RepositoryModelUnloadResponse"],
  SystemSharedMemoryStatus: ["unary", "SystemSharedMemoryStatusRequest", "SystemSharedMemoryStatusResponse"],
  SystemSharedMemoryRegister: ["unary", "SystemSharedMemoryRegisterRequest", "SystemSharedMemoryRegisterResponse"],
  SystemSharedMemoryUnregister: [
    "unary",
    "SystemSharedMemoryUnregisterRequest",
    "SystemSharedMemoryUnregisterResponse",
  ],
  CudaSharedMemoryStatus: ["unary", "CudaSharedMemoryStatusRequest", "CudaSharedMemoryStatusResponse"],
  CudaSharedMemoryRegister: ["unary", "CudaSharedMemoryRegisterRequest", "CudaSharedMemoryRegisterResponse"],
  CudaSharedMemoryUnregister: ["unary", "CudaSharedMemoryUnregisterRequest", "CudaSharedMemoryUnregisterResponse"],
  TraceSetting: ["unary", "TraceSettingRequest", "TraceSettingResponse"],
  LogSettings: ["unary", "LogSettingsRequest", "LogSettingsResponse"],
};
