import { basename, dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { GALLEY_BACKEND_NAMES, GALLEY_BACKENDS, GALLEY_PYTHON_BASED_BACKENDS } from "../galley-backends.js";
import { type CheckOptions, checkRepository } from "../model-check.js";
import { isModelFolder, readRepository } from "../repository-reader.js";
import { type CommandIO, table, UsageError } from "./command-io.js";
import { onnxAutoCompleteFromDisk } from "./onnx-from-disk.js";

/** What the `galley` command gives `validate` of the server it stands for. */
export interface ValidateContext {
  /**
   * Why a Galley backend cannot load models on this machine (its library is absent), in the
   * server's words; `galley` passes its backends' own checks. Absent: libraries are not checked.
   */
  missingLibrary?: CheckOptions["missingLibrary"];
}

export const VALIDATE_USAGE = `Usage: galley config validate <repository | model folder> [options]

Loads every model's configuration as tritonserver would: autofill, the ONNX Runtime backend's
auto-complete (from the model file), normalisation, validation, version policy, ensembles.
Prints a table of models; exits 1 if any model would fail to load. A backend that needs a
library (${GALLEY_BACKENDS.flatMap((b) => (b.needs ? [`${b.name}: ${b.needs}`] : [])).join("; ")})
fails its models when the library is absent here, as the server's load would.

Options:
  --disable-auto-complete-config  strict mode (also --strict-model-config=true)
  --model-config-name <name>      use <model>/configs/<name>.pbtxt where present
  --backend <name>                a backend the server has besides Galley's ${[...GALLEY_BACKEND_NAMES].join(", ")};
                                  naming one of Galley's says the server has its library (repeatable)
  --any-backend                   accept any backend name, check no library
  --gpus <ids>                    GPU ids the server will have, e.g. 0,1 (default: none)
  --backend-config onnxruntime,default-max-batch-size=<n>
`;

export async function validateCommand(args: string[], io: CommandIO, context: ValidateContext = {}): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      "disable-auto-complete-config": { type: "boolean" },
      "strict-model-config": { type: "string" },
      "model-config-name": { type: "string" },
      backend: { type: "string", multiple: true },
      "any-backend": { type: "boolean" },
      gpus: { type: "string" },
      "backend-config": { type: "string", multiple: true },
    },
  });
  if (positionals.length !== 1) throw new UsageError("validate takes one path");
  const target = resolve(io.cwd, positionals[0] ?? "");
  const single = await isModelFolder(target).catch(() => {
    throw new UsageError(`cannot read '${positionals[0]}'`);
  });
  const repository = single ? dirname(target) : target;
  const strict =
    values["disable-auto-complete-config"] === true || /^(true|on|1)$/i.test(values["strict-model-config"] ?? "");
  const gpus = values.gpus ? values.gpus.split(",").map((g) => Number(g.trim())) : [];
  if (gpus.some((g) => !Number.isInteger(g) || g < 0)) throw new UsageError(`invalid --gpus '${values.gpus}'`);
  const defaultMaxBatchSize = maxBatchSizeSetting(values["backend-config"] ?? []);

  const sources = await readRepository(
    repository,
    values["model-config-name"] ? { configName: values["model-config-name"] } : {},
  );
  const anyBackend = values["any-backend"] === true;
  const named = new Set(values.backend ?? []);
  // Each library's verdict here, for the lines under the table: undefined when found.
  const libraries = new Map<string, string | undefined>();
  const probe = context.missingLibrary;
  const missingLibrary: CheckOptions["missingLibrary"] | undefined =
    probe && !anyBackend
      ? async (backend, config) => {
          if (named.has(backend)) return undefined;
          const missing = await probe(backend, config);
          // The lines under the table are about the backends' own libraries, not a Python-based runtime's.
          if (config.runtime === "" && (!libraries.has(backend) || missing !== undefined))
            libraries.set(backend, missing);
          return missing;
        }
      : undefined;
  const checks = await checkRepository(sources, {
    autoComplete: !strict,
    gpus,
    ...(anyBackend
      ? {}
      : { backends: new Set([...GALLEY_BACKEND_NAMES, ...named]), pythonBasedBackends: GALLEY_PYTHON_BASED_BACKENDS }),
    ...(missingLibrary ? { missingLibrary } : {}),
    backendAutoComplete: (source, config, version) =>
      onnxAutoCompleteFromDisk(source, config, version, defaultMaxBatchSize),
  });
  const shown = [...checks.values()].filter((c) => !single || c.name === basename(target));
  const rows = [["Model", "Version", "Status"]];
  for (const check of shown) {
    const versions = check.versions.length > 0 ? check.versions.join(", ") : "-";
    const problem = check.diagnostics[0];
    // A message of several lines (libtorch's install hint) takes one row.
    const message = problem?.message.replace(/\s*\n\s*/g, " ");
    rows.push([check.name, versions, message ? `UNAVAILABLE: ${message}` : "READY"]);
  }
  for (const source of sources) {
    if (!checks.has(source.name))
      rows.push([source.name, "-", "UNAVAILABLE: model name appears in more than one repository"]);
  }
  io.stdout(rows.length > 1 ? table(rows) : "no models found\n");
  const failed = shown.filter((c) => c.diagnostics.length > 0).length;
  io.stdout(`${shown.length - failed} of ${shown.length} model(s) would load.\n`);
  // What the server needs for the backends these models use.
  const used = new Set(shown.flatMap((c) => (c.config ? [c.config.backend] : [])));
  for (const backend of GALLEY_BACKENDS) {
    if (!backend.needs || !used.has(backend.name)) continue;
    const where = named.has(backend.name)
      ? "not checked: named with --backend"
      : !libraries.has(backend.name)
        ? "not checked here"
        : libraries.get(backend.name) === undefined
          ? "found here"
          : "missing here";
    io.stdout(`Backend '${backend.name}' needs ${backend.needs} (${where}).\n`);
  }
  return failed > 0 || shown.length === 0 ? 1 : 0;
}

function maxBatchSizeSetting(settings: string[]): number | undefined {
  let value: number | undefined;
  for (const setting of settings) {
    const match = /^onnxruntime,default-max-batch-size=(\d+)$/.exec(setting);
    if (!match) throw new UsageError(`unsupported --backend-config '${setting}'`);
    value = Number(match[1]);
  }
  return value;
}
