import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema } from "@galley/proto";
import { autoCompleteOnnx } from "../onnx-auto-complete.js";
import { OnnxModelError, readOnnxModelIO } from "../onnx-io.js";
import { printModelConfig } from "../text-format.js";
import { type CommandIO, UsageError } from "./command-io.js";

export const NEW_USAGE = `Usage: galley config new <model.onnx> [--name <name>] [--max-batch-size <n>] [--repository <dir>]

Scaffolds a config.pbtxt from the model's inputs and outputs, as the ONNX Runtime backend's
auto-complete would fill it, and prints it. With --repository, writes
<dir>/<name>/config.pbtxt and copies the model to <dir>/<name>/1/model.onnx.

Options:
  --name <name>          model name (default: the file name without .onnx)
  --max-batch-size <n>   0 for a model that does not batch (default: 4 when the model can batch)
  --repository <dir>     write a repository layout instead of printing
`;

export async function newCommand(args: string[], io: CommandIO): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { name: { type: "string" }, "max-batch-size": { type: "string" }, repository: { type: "string" } },
  });
  if (positionals.length !== 1) throw new UsageError("new takes one model file");
  const file = resolve(io.cwd, positionals[0] ?? "");
  const name = values.name ?? basename(file).replace(/\.onnx$/, "");
  const maxBatchSize = values["max-batch-size"] === undefined ? 0 : Number(values["max-batch-size"]);
  if (!Number.isInteger(maxBatchSize) || maxBatchSize < 0) {
    throw new UsageError(`invalid --max-batch-size '${values["max-batch-size"]}'`);
  }
  let model: ReturnType<typeof readOnnxModelIO>;
  try {
    model = readOnnxModelIO(await readFile(file));
  } catch (error) {
    if (!(error instanceof OnnxModelError) && (error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    io.stderr(`error: ${positionals[0]}: ${(error as Error).message}\n`);
    return 1;
  }
  const start = create(ModelConfigSchema, { name, backend: "onnxruntime", maxBatchSize });
  const result = autoCompleteOnnx(start, model);
  if (result.diagnostics.length > 0) {
    io.stderr(`error: ${result.diagnostics[0]?.message}\n`);
    return 1;
  }
  const text = printModelConfig(result.config);
  if (!values.repository) {
    io.stdout(text);
    return 0;
  }
  const folder = join(resolve(io.cwd, values.repository), name);
  await mkdir(join(folder, "1"), { recursive: true });
  await writeFile(join(folder, "config.pbtxt"), text);
  await copyFile(file, join(folder, "1", "model.onnx"));
  io.stdout(`wrote ${join(folder, "config.pbtxt")} and ${join(folder, "1", "model.onnx")}\n`);
  return 0;
}
