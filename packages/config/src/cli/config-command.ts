import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { printModelConfigJson } from "../json-form.js";
import { ConfigParseError, parseModelConfig, printModelConfig } from "../text-format.js";
import { BUILD_USAGE, buildCommand } from "./build-command.js";
import { type CommandIO, processIO, UsageError } from "./command-io.js";
import { NEW_USAGE, newCommand } from "./new-command.js";
import { VALIDATE_USAGE, type ValidateContext, validateCommand } from "./validate-command.js";

const PRINT_USAGE = `Usage: galley config print <config.pbtxt> [--json]

Parses the file and prints it in canonical text form, or in Triton's JSON form with --json.
`;

const USAGE = `Usage: galley config <command>

Commands:
  validate <repository | model folder>   check configs as tritonserver loads them
  print <config.pbtxt> [--json]          print a config as text or Triton's JSON
  build <module.ts | module.js>          write config.pbtxt files from TypeScript configs
  new <model.onnx>                       scaffold a config from an ONNX model

Run 'galley config <command> --help' for a command's options.
`;

/** What the `galley` command tells `galley config` of its server (see {@link ValidateContext}). */
export type ConfigCommandContext = ValidateContext;

const commands: Record<
  string,
  { usage: string; run: (args: string[], io: CommandIO, context: ConfigCommandContext) => Promise<number> }
> = {
  validate: { usage: VALIDATE_USAGE, run: validateCommand },
  print: { usage: PRINT_USAGE, run: printCommand },
  build: { usage: BUILD_USAGE, run: buildCommand },
  new: { usage: NEW_USAGE, run: newCommand },
};

/**
 * `galley config`: validate, print, build and scaffold model configurations. Returns the exit
 * code: 0 on success, 1 when what was checked fails, 2 for a usage mistake.
 *
 * @example
 * process.exitCode = await runConfigCommand(["validate", "models/"]);
 */
export async function runConfigCommand(
  args: string[],
  io: CommandIO = processIO(),
  context: ConfigCommandContext = {},
): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined || name === "--help" || name === "help") {
    (name === undefined ? io.stderr : io.stdout)(USAGE);
    return name === undefined ? 2 : 0;
  }
  const command = commands[name];
  if (!command) {
    io.stderr(`error: unknown command 'config ${name}'\n\n${USAGE}`);
    return 2;
  }
  if (rest.includes("--help")) {
    io.stdout(command.usage);
    return 0;
  }
  try {
    return await command.run(rest, io, context);
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      io.stderr(`error: ${(error as Error).message}\n\n${command.usage}`);
      return 2;
    }
    throw error;
  }
}

async function printCommand(args: string[], io: CommandIO): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: "boolean" } } });
  if (positionals.length !== 1) throw new UsageError("print takes one file");
  const file = positionals[0] ?? "";
  let text: string;
  try {
    text = await readFile(resolve(io.cwd, file), "utf8");
  } catch (error) {
    io.stderr(`error: cannot read ${file}: ${(error as Error).message}\n`);
    return 1;
  }
  try {
    const config = parseModelConfig(text, file);
    io.stdout(values.json ? `${printModelConfigJson(config)}\n` : printModelConfig(config));
    return 0;
  } catch (error) {
    if (!(error instanceof ConfigParseError)) throw error;
    io.stderr(`error: ${error.message}\n`);
    return 1;
  }
}
