import { execFile } from "node:child_process";
import { statSync } from "node:fs";
import { access, constants, realpath, stat } from "node:fs/promises";
import { delimiter, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { fromModelConfigJson, toModelConfigJson } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { Logger } from "../../base/log.js";
import type { Backend, BackendModel, DevicePlacement } from "../backend.js";
import { outputRules } from "../batch-io.js";
import { processTransport, type SharedProcess, sharedProcess } from "../host/process-transport.js";
import { type InstanceSpec, initializeArgs, instanceSpecs, wholeNumberParameter } from "../instance-specs.js";
import type { InferencePath } from "../scripted/bls-calls.js";
import { CustomMetrics } from "./custom-metrics.js";
import { PythonInstance } from "./python-instance.js";
import type { FromStub, ToStub } from "./python-messages.js";
import { segmentMapper } from "./shm-mapping.js";

/** The folder holding the stub and `triton_python_backend_utils` (`packages/server/python`). */
export const PYTHON_STUB_DIR = fileURLToPath(new URL("../../../python/", import.meta.url));
/** The stub's entry. */
export const PYTHON_STUB = join(PYTHON_STUB_DIR, "galley_python_stub.py");

/** The model file when `default_model_filename` names none. */
export const PYTHON_MODEL_FILE = "model.py";

/**
 * Galley's own Python-based backends (Triton's `backends/<name>/model.py`), shipped with the
 * server: a folder per backend name holding its runtime `model.py` (`pytorch`: PyTorch-2
 * `model.py` models, for configs with `runtime: "model.py"`). See {@link pythonBasedBackends}.
 */
export const PYTHON_BASED_BACKENDS_DIR = join(PYTHON_STUB_DIR, "backends");

/** Options for {@link createPythonBackend}. */
export interface PythonBackendOptions {
  log: Logger;
  /** The server's inference path, for BLS calls (given late: the core is built after the backends). */
  inference: () => InferencePath;
  /** `--backend-config python,python-executable=<path>`; default `python3` on PATH. */
  pythonExecutable?: string;
  /** Where custom metric families go: the server's registry, which its metrics endpoint shows (default: one of its own). */
  metrics?: CustomMetrics;
  /**
   * How long an unload waits for the requests in flight before it ends the stubs still executing
   * (SIGTERM, SIGKILL 2 s later), failing their requests (`--exit-timeout-secs`; default: as long as they run).
   */
  unloadTimeoutMs?: number;
}

/** The model file of a Python-based backend: `<backend-directory>/<name>/model.py`. */
export interface PythonBasedBackend {
  /** The backend's name (a config's `backend`). */
  name: string;
  /** `<backend-directory>/<name>`, which holds its `model.py`. */
  folder: string;
}

/**
 * What the Python backend refuses in a stub's name (the model's name for the auto-complete stub,
 * the instance's for the others), as Triton's (`INVALID_CHARS`, pb_utils.h): the shell's
 * metacharacters, checked before the stub starts and before `model.py` is read.
 */
const STUB_NAME_INVALID = /[;|&$`<>()[\]{}\\"'*?~#!]/;

/** Triton's refusal of a stub's name (stub_launcher.cc), or undefined for a valid one. */
export function stubNameProblem(name: string): string | undefined {
  return name === "" || STUB_NAME_INVALID.test(name) ? "Invalid stub name: contains invalid characters" : undefined;
}

/**
 * Triton's `FORCE_CPU_ONLY_INPUT_TENSORS` (python_be.cc): "yes" (the default) gives the model its
 * inputs in host memory; "no" lets inputs that are on a GPU stay there (`is_cpu()` false, read
 * with `to_dlpack()` / `torch.from_dlpack`). Any other value fails the load in Triton's words.
 */
export function forceCpuOnlyInputTensors(config: ModelConfig, log?: Logger): boolean {
  const value = config.parameters.FORCE_CPU_ONLY_INPUT_TENSORS?.stringValue;
  if (value === undefined) return true;
  if (value === "yes") {
    log?.info("Forcing CPU only input tensors.");
    return true;
  }
  if (value === "no") {
    log?.info("Input tensors can be both in CPU and GPU. FORCE_CPU_ONLY_INPUT_TENSORS is off.");
    return false;
  }
  // Triton's message, with its stray quote.
  throw new Error(`Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: ${value}'`);
}

/**
 * Galley's `SHARED_STUB_PROCESS`: "yes" runs a model's instances on one device in one stub process
 * (one CUDA context for all of them; each instance a thread there, with its own model object and
 * shared memory); "no" (the default, as Triton) one process per instance. Any other value fails
 * the load.
 */
export function sharedStubProcess(config: ModelConfig): boolean {
  const value = config.parameters.SHARED_STUB_PROCESS?.stringValue;
  if (value === undefined || value === "no") return false;
  if (value === "yes") return true;
  throw new Error(`Incorrect value for SHARED_STUB_PROCESS: ${value} (expected "yes" or "no")`);
}

/**
 * The `python` backend: Triton Python models (`model.py` with `TritonPythonModel`), one stub
 * process per instance, tensors through shared memory. Parameters: `EXECUTION_ENV_PATH` (a
 * folder holding `bin/python3`; `$$TRITON_MODEL_DIRECTORY` is the model's folder),
 * `execute_timeout_ms` and `initialize_timeout_ms` (none by default, as in Triton),
 * `SHARED_STUB_PROCESS` (see {@link sharedStubProcess}).
 *
 * With `based`, a Python-based backend (Triton's): the backend named so, whose models all run its
 * folder's `model.py` (imported as `model`, its folder on `sys.path`) instead of one of their own;
 * `pb_utils.get_model_dir()` is still the model's version folder, and the settings are the
 * `python` backend's.
 */
export function createPythonBackend(options: PythonBackendOptions, based?: PythonBasedBackend): Backend {
  const metrics = options.metrics ?? new CustomMetrics();
  const modelFile = async (modelPath: string, version: number, config: ModelConfig) =>
    based ? join(based.folder, PYTHON_MODEL_FILE) : findModelFile(modelPath, version, config);
  /** Where the stub imports the model from, and what `get_model_dir()` answers. */
  const placement = (file: string, modelPath: string, version: number) => ({
    modelDir: based ? join(modelPath, String(version)) : dirname(file),
    ...(based ? { backendFolder: based.folder } : {}),
  });
  return {
    name: based?.name ?? "python",

    async autoComplete(config, modelPath, version) {
      // Triton refuses the name before the auto-complete stub starts, so before model.py runs.
      const refused = stubNameProblem(config.name);
      if (refused) return { config, diagnostics: [{ path: "", message: refused }], notes: [] };
      let file: string | undefined;
      let python: Interpreter;
      try {
        file = await modelFile(modelPath, version, config);
        python = await interpreter(config, modelPath, options.pythonExecutable);
      } catch (error) {
        // A config that points outside its model, or at a packed environment: the load fails with why.
        return { config, diagnostics: [{ path: "parameters", message: (error as Error).message }], notes: [] };
      }
      if (!file) return undefined;
      const completed = await runAutoComplete(
        python,
        { file, ...placement(file, modelPath, version) },
        config,
        options.log,
      );
      if (typeof completed === "string") {
        return {
          config,
          diagnostics: [{ path: "", message: `unable to auto-complete model '${config.name}': ${completed}` }],
          notes: [],
        };
      }
      return { config: completed, diagnostics: [], notes: ["auto_complete_config"] };
    },

    async load(context): Promise<BackendModel> {
      const { config } = context;
      const specs = instanceSpecs(config);
      for (const spec of specs) {
        const refused = stubNameProblem(spec.name);
        if (refused) throw new Error(refused);
      }
      const file = await modelFile(context.modelPath, context.version, config);
      if (!file) {
        const name = config.defaultModelFilename || PYTHON_MODEL_FILE;
        throw new Error(`unable to find '${join(context.versionPath, name)}' for model '${config.name}'`);
      }
      const parameter = (key: string) => wholeNumberParameter(config, key);
      const forceCpuOnlyInputs = forceCpuOnlyInputTensors(config, options.log);
      const shared = sharedStubProcess(config);
      const executeTimeoutMs = parameter("execute_timeout_ms");
      const initializeTimeoutMs = parameter("initialize_timeout_ms");
      const python = await interpreter(config, context.modelPath, options.pythonExecutable);
      const mapper = await segmentMapper(options.log);
      const rules = outputRules(config);
      const modelConfig = JSON.stringify(toModelConfigJson(config));
      // One process per instance, or (SHARED_STUB_PROCESS) one per device for the instances there.
      const processes = new Map<string | number, SharedProcess<ToStub, FromStub>>();
      const placeOf = (spec: InstanceSpec) => (shared ? spec.device : spec.name);
      const stubOf = (spec: InstanceSpec) => {
        const members = specs.filter((other) => placeOf(other) === placeOf(spec));
        let process = processes.get(placeOf(spec));
        if (!process) {
          const names = members.map((member) => member.name);
          process = sharedProcess<ToStub, FromStub>({
            command: python.command,
            // Named as Triton's stub process is, so that what finds Triton's stubs (`pgrep -f
            // triton_python_backend_stub`) finds these, with the names of the instances it runs.
            args: [PYTHON_STUB, "triton_python_backend_stub", ...names],
            env: python.env,
            name: names.join(","),
            log: options.log,
            channels: members.length,
          });
          processes.set(placeOf(spec), process);
        }
        return { process, channel: members.indexOf(spec) };
      };
      const closeProcesses = () => Promise.all([...processes.values()].map((p) => p.close()));
      const started = await Promise.allSettled(
        specs.map((spec) =>
          PythonInstance.start({
            name: spec.name,
            ...stubOf(spec),
            init: {
              file,
              ...placement(file, context.modelPath, context.version),
              decoupled: config.modelTransactionPolicy?.decoupled ?? false,
              outputs: config.output.map((o) => o.name),
              forceCpuOnlyInputs,
              // Triton's Python backend names the kind without its prefix: CPU, GPU or MODEL.
              args: { ...initializeArgs(config, spec, modelConfig, context), model_instance_kind: spec.kind },
            },
            outputRules: rules,
            reschedules:
              config.schedulingChoice.case === "sequenceBatching" && config.schedulingChoice.value.iterativeSequence,
            mapper,
            metrics,
            ...(executeTimeoutMs ? { executeTimeoutMs } : {}),
            ...(initializeTimeoutMs ? { initializeTimeoutMs } : {}),
            ...(context.signal ? { signal: context.signal } : {}),
            ...(spec.rateLimiter ? { rateLimiter: spec.rateLimiter } : {}),
            inference: options.inference,
            log: options.log,
          }),
        ),
      );
      const opened = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed) {
        await Promise.all(opened.map((i) => i.close()));
        await closeProcesses();
        throw new Error(`unable to load model '${config.name}': ${explain((failed.reason as Error).message, python)}`);
      }
      // FORCE_CPU_ONLY_INPUT_TENSORS "no" (whatever the instances' kind, as in Triton): tensors on
      // any GPU reach the stubs there (a client's CUDA region by its handle, another model's kept
      // tensor by one device copy; a stub without CUDA gets host copies), and the tensors the
      // model returns on a GPU are mapped here as plain device memory (`region`) for the next model.
      const deviceTensors: DevicePlacement | undefined = forceCpuOnlyInputs
        ? undefined
        : { kind: "region", takes: ["pytorch"] };
      return {
        instances: opened.filter((_, i) => !specs[i]?.passive),
        ...(deviceTensors ? { deviceTensors } : {}),
        healthy: () => opened.every((i) => i.healthy),
        unhealthy: () => {
          const down = opened.find((i) => !i.healthy);
          return down && `Stub process '${down.name}' is not healthy.`;
        },
        // Triton asks each instance in turn; the first that is not ready answers for the model.
        async isReady() {
          for (const instance of opened) {
            const answer = await instance.isReady();
            if (answer !== true) return answer;
          }
          return true;
        },
        ...(options.unloadTimeoutMs !== undefined ? { unloadTimeoutMs: options.unloadTimeoutMs } : {}),
        // Instances that share a process name it once.
        processIds: () => [...new Set(opened.flatMap((i) => (i.pid === undefined ? [] : [i.pid])))],
        async unload() {
          await Promise.all(opened.map((i) => i.close()));
          await closeProcesses();
        },
      };
    },
  };
}

/**
 * Triton's Python-based backends for `--backend-directory`: the backend `<name>` when
 * `<directory>/<name>/model.py` is a file (undefined otherwise), run by the Python backend with
 * `options`. Asked only for names the server's own backends do not have.
 */
export function pythonBasedBackends(
  directory: string,
  options: PythonBackendOptions,
): (name: string) => Backend | undefined {
  const found = new Map<string, Backend>();
  return (name) => {
    const known = found.get(name);
    if (known) return known;
    // A backend's name is one folder of the directory, never a path out of it.
    if (name === "" || name === "." || name === ".." || /[/\\\0]/.test(name)) return undefined;
    const folder = join(resolve(directory), name);
    try {
      if (!statSync(join(folder, PYTHON_MODEL_FILE)).isFile()) return undefined;
    } catch {
      return undefined;
    }
    const backend = createPythonBackend(options, { name, folder });
    found.set(name, backend);
    return backend;
  };
}

/** A start failure, with what to do when the interpreter itself is the problem. */
function explain(message: string, python: Interpreter): string {
  if (/could not be started: spawn .* ENOENT/.test(message)) return `${message} (${pythonHint(python.command)})`;
  return message;
}

function pythonHint(command: string): string {
  return `the Python backend runs '${command}': install python3 with numpy, or pass --backend-config python,python-executable=<path>`;
}

/**
 * Why the server's interpreter (`python-executable`, default `python3`) cannot run Python models
 * here: it does not start, or cannot import numpy (and `module`: `torch` for the PyTorch-2
 * runtime); undefined when it can. `galley config validate` asks (a model's own
 * `EXECUTION_ENV_PATH` interpreter is checked when it loads).
 */
export function pythonMissing(executable = "python3", module = "numpy"): Promise<string | undefined> {
  const hint =
    module === "numpy"
      ? pythonHint(executable)
      : `the Python backend runs '${executable}': install ${module} there (pip install ${module}), or pass --backend-config python,python-executable=<path> or set EXECUTION_ENV_PATH`;
  return new Promise((answer) => {
    execFile(executable, ["-c", `import numpy, ${module}`], { timeout: 60_000 }, (error, _stdout, stderr) => {
      if (!error) answer(undefined);
      else if ((error as NodeJS.ErrnoException).code === "ENOENT") answer(`'${executable}' is not found (${hint})`);
      else {
        const last = stderr.trim().split("\n").at(-1) || error.message.trim().split("\n")[0];
        answer(`'${executable}' cannot import ${module}: ${last} (${hint})`);
      }
    });
  });
}

/**
 * The model file: `default_model_filename` or `model.py`, named inside the version folder and,
 * symlinks resolved, inside the model's folder.
 */
async function findModelFile(modelPath: string, version: number, config: ModelConfig): Promise<string | undefined> {
  const folder = join(modelPath, String(version));
  const name = config.defaultModelFilename || PYTHON_MODEL_FILE;
  const path = resolve(folder, name);
  if (!inside(folder, path)) {
    throw new Error(`default_model_filename '${name}' of model '${config.name}' is outside its version folder`);
  }
  try {
    // A symlink may point elsewhere in the model's folder (shared code), not outside it.
    const real = await realpath(path);
    if (!inside(await realpath(modelPath), real)) {
      throw new Error(`the model file '${name}' of model '${config.name}' leads outside the model's folder`);
    }
    return (await stat(real)).isFile() ? path : undefined;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

function inside(folder: string, path: string): boolean {
  const rel = relative(folder, path);
  return rel !== "" && !rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel);
}

/** The program that runs a model's stub, and its environment. */
interface Interpreter {
  command: string;
  env: NodeJS.ProcessEnv;
}

const MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY";

/**
 * The interpreter for a model: its `EXECUTION_ENV_PATH` environment's `bin/python3`, else the
 * server's (`python-executable`, default `python3`). The stub's folder goes first on PYTHONPATH.
 */
async function interpreter(config: ModelConfig, modelPath: string, executable = "python3"): Promise<Interpreter> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PYTHONPATH: [PYTHON_STUB_DIR, process.env.PYTHONPATH].filter(Boolean).join(delimiter),
    PYTHONUNBUFFERED: "1",
  };
  const setting = config.parameters.EXECUTION_ENV_PATH?.stringValue?.trim();
  if (!setting) return { command: executable, env };
  if (/\.(tar\.gz|tgz|tar)$/i.test(setting)) {
    throw new Error(
      `EXECUTION_ENV_PATH '${setting}' of model '${config.name}' is a packed environment: Galley does not unpack archives; unpack it (conda-pack's tarball into a folder) and set EXECUTION_ENV_PATH to the folder that holds bin/python3`,
    );
  }
  const inModel = setting.includes(MODEL_DIRECTORY) || !isAbsolute(setting);
  const folder = resolve(modelPath, setting.replaceAll(MODEL_DIRECTORY, modelPath));
  let real: string;
  try {
    real = await realpath(folder);
  } catch {
    throw new Error(`EXECUTION_ENV_PATH '${setting}' of model '${config.name}' does not exist`);
  }
  if (inModel && !inside(await realpath(modelPath), real)) {
    throw new Error(`EXECUTION_ENV_PATH '${setting}' of model '${config.name}' leads outside the model's folder`);
  }
  const command = join(real, "bin", "python3");
  try {
    await access(command, constants.X_OK);
  } catch {
    throw new Error(`EXECUTION_ENV_PATH '${setting}' of model '${config.name}' has no executable bin/python3`);
  }
  return {
    command,
    env: {
      ...env,
      VIRTUAL_ENV: real,
      PATH: [join(real, "bin"), process.env.PATH].filter(Boolean).join(delimiter),
      LD_LIBRARY_PATH: [join(real, "lib"), process.env.LD_LIBRARY_PATH].filter(Boolean).join(delimiter),
    },
  };
}

/** Call the model's static `auto_complete_config` in a throw-away stub, as Triton does. */
function runAutoComplete(
  python: Interpreter,
  where: { file: string; modelDir: string; backendFolder?: string },
  config: ModelConfig,
  log: Logger,
): Promise<ModelConfig | string> {
  const open = processTransport<ToStub, FromStub>({
    command: python.command,
    args: [PYTHON_STUB],
    env: python.env,
    name: `${config.name}_autocomplete`,
    log,
  });
  let transport: ReturnType<typeof open> | undefined;
  return new Promise<ModelConfig | string>((resolveConfig) => {
    transport = open({
      message(message) {
        if (message.kind === "start-failed") resolveConfig(message.message);
        if (message.kind !== "auto-completed") return;
        if (message.error !== undefined) resolveConfig(message.error);
        else {
          try {
            resolveConfig(fromModelConfigJson(JSON.parse(message.config ?? "{}")));
          } catch (error) {
            resolveConfig((error as Error).message);
          }
        }
      },
      ended: (reason) => resolveConfig(explain(`the auto-complete stub ${reason}`, python)),
    });
    transport.send({ kind: "auto-complete", ...where, config: JSON.stringify(toModelConfigJson(config)) });
  }).finally(() => void transport?.kill());
}
