import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { isMessage } from "@bufbuild/protobuf";
import { type ModelConfig, ModelConfigSchema } from "@galley/proto";
import { checkRepository } from "../model-check.js";
import { Platform } from "../rules/platforms.js";
import { printModelConfig } from "../text-format.js";
import { type CommandIO, UsageError } from "./command-io.js";

export const BUILD_USAGE = `Usage: galley config build <module.ts | module.js> [--repository <dir>] [--dry-run]

Imports the module and writes each ModelConfig it exports (named exports, the default export,
or arrays of configs) to <repository>/<name>/config.pbtxt. Every config is checked first, with
ensembles against the others; nothing is written if any fails. An ensemble also gets its
(empty) version folder, which Triton requires; other models' version folders hold their files.

Options:
  --repository <dir>  where to write (default: the current folder)
  --dry-run           check and print what would be written, write nothing
`;

export async function buildCommand(args: string[], io: CommandIO): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { repository: { type: "string" }, "dry-run": { type: "boolean" } },
  });
  if (positionals.length !== 1) throw new UsageError("build takes one module");
  const file = resolve(io.cwd, positionals[0] ?? "");
  const exports = await importModule(file);
  const configs = collectConfigs(exports);
  if (configs.length === 0) {
    io.stderr(`error: ${positionals[0]} exports no model configurations\n`);
    return 1;
  }
  const names = new Set<string>();
  for (const config of configs) {
    if (config.name === "") {
      io.stderr("error: every exported config needs a name (it names the model folder)\n");
      return 1;
    }
    if (names.has(config.name)) {
      io.stderr(`error: two exported configs are named '${config.name}'\n`);
      return 1;
    }
    names.add(config.name);
  }
  // Version folders do not exist yet: check as if each model had the one written for an ensemble.
  const checks = await checkRepository(
    configs.map((config) => ({ name: config.name, config, versions: [firstVersion(config)] })),
    {},
  );
  const failed = [...checks.values()].filter((c) => c.diagnostics.length > 0);
  for (const check of failed) io.stderr(`error: ${check.name}: ${check.diagnostics[0]?.message}\n`);
  if (failed.length > 0) return 1;

  const repository = resolve(io.cwd, values.repository ?? ".");
  for (const config of configs) {
    const target = join(repository, config.name, "config.pbtxt");
    if (values["dry-run"]) {
      io.stdout(`# ${target}\n${printModelConfig(config)}\n`);
      continue;
    }
    await mkdir(join(repository, config.name), { recursive: true });
    await writeFile(target, printModelConfig(config));
    io.stdout(`wrote ${target}\n`);
    if (config.platform === Platform.ensemble) {
      const folder = await ensembleVersionFolder(join(repository, config.name), config);
      if (folder) io.stdout(`made ${folder}\n`);
    }
  }
  return 0;
}

/** The version a new model folder gets: the first its version policy names, else 1. */
function firstVersion(config: ModelConfig): number {
  const policy = config.versionPolicy?.policyChoice;
  const listed = policy?.case === "specific" ? policy.value.versions.map(Number).sort((a, b) => a - b) : [];
  return listed[0] ?? 1;
}

/**
 * An ensemble has no files, yet loads only with a version folder (Triton's rule, PROTOCOL.md §5):
 * make `<model>/<version>/` unless the folder already has a numeric one. Returns the folder made.
 */
async function ensembleVersionFolder(model: string, config: ModelConfig): Promise<string | undefined> {
  const entries = await readdir(model, { withFileTypes: true });
  if (entries.some((e) => e.isDirectory() && /^(0|[1-9][0-9]*)$/.test(e.name))) return undefined;
  const folder = join(model, String(firstVersion(config)));
  await mkdir(folder);
  return folder;
}

async function importModule(file: string): Promise<Record<string, unknown>> {
  if (/\.[mc]?tsx?$/.test(file)) {
    const { tsImport } = await import("tsx/esm/api");
    return (await tsImport(pathToFileURL(file).href, import.meta.url)) as Record<string, unknown>;
  }
  return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
}

function collectConfigs(exports: Record<string, unknown>): ModelConfig[] {
  const found: ModelConfig[] = [];
  const seen = new Set<unknown>();
  const visit = (value: unknown) => {
    if (seen.has(value)) return;
    seen.add(value);
    if (isMessage(value, ModelConfigSchema)) found.push(value);
    else if (Array.isArray(value)) value.forEach(visit);
  };
  for (const value of Object.values(exports)) visit(value);
  // A CommonJS module (a .ts file outside a "type": "module" package) arrives as `default`.
  const commonJs = exports.default;
  if (commonJs && typeof commonJs === "object" && !Array.isArray(commonJs) && !isMessage(commonJs)) {
    for (const value of Object.values(commonJs)) visit(value);
  }
  return found;
}
