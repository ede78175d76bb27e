import { readFile, realpath } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";
import type { ModelConfig } from "@galley/proto";

/**
 * The path of a file a config names inside one of the model's folders (`""` for the model folder
 * itself, `warmup/`, `initial_state/`, a version folder). A name that is absolute or climbs out of
 * that folder is refused, so a config cannot make the server read arbitrary files.
 *
 * @throws Error naming the field and the file.
 */
export function modelFile(modelPath: string, folder: string, name: string, field: string): string {
  const clean = normalize(name);
  if (name === "" || isAbsolute(name) || clean === ".." || clean.startsWith(`..${sep}`) || name.includes("\0")) {
    const where = folder === "" ? "the model folder" : `the model's '${folder}' folder`;
    throw new Error(`${field} '${name.replaceAll("\0", "\\0")}' must name a file inside ${where}`);
  }
  return join(modelPath, folder, clean);
}

/**
 * Read a file a config names (see {@link modelFile}); a symbolic link that leads out of the
 * model folder is refused too.
 */
export async function readModelFile(modelPath: string, folder: string, name: string, field: string): Promise<Buffer> {
  const path = modelFile(modelPath, folder, name, field);
  try {
    const [real, root] = await Promise.all([realpath(path), realpath(modelPath)]);
    if (!real.startsWith(root + sep)) throw new Error(`${field} '${name}' leads out of the model folder`);
    return await readFile(real);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === undefined) throw error;
    // Triton's text (`ReadTextFile`), with the C library's wording of the reason.
    throw new Error(`failed to open text file for read ${path}: ${STRERROR[code] ?? code}`, { cause: error });
  }
}

/** `strerror` for the errors reading a file gives most. */
const STRERROR: Record<string, string> = {
  ENOENT: "No such file or directory",
  EISDIR: "Is a directory",
  ENOTDIR: "Not a directory",
  EACCES: "Permission denied",
  EPERM: "Operation not permitted",
  ELOOP: "Too many levels of symbolic links",
  ENAMETOOLONG: "File name too long",
  EMFILE: "Too many open files",
  ENFILE: "Too many open files in system",
  EIO: "Input/output error",
  ENOMEM: "Cannot allocate memory",
  ERR_FS_FILE_TOO_LARGE: "File too large",
};

/**
 * Check every file name a config holds (`default_model_filename`, `label_filename`, warmup
 * `input_data_file`, `initial_state` `data_file`) before anything reads them: a config override
 * comes from a client.
 *
 * @throws Error naming the first field that leaves its folder.
 */
export function checkConfigFiles(config: ModelConfig): void {
  if (config.defaultModelFilename !== "") {
    modelFile("", "1", config.defaultModelFilename, "default_model_filename");
  }
  for (const output of config.output) {
    if (output.labelFilename !== "") modelFile("", "", output.labelFilename, "label_filename");
  }
  for (const warmup of config.modelWarmup) {
    for (const input of Object.values(warmup.inputs)) {
      const source = input.inputDataType;
      if (source.case === "inputDataFile") modelFile("", "warmup", source.value, "warmup input_data_file");
    }
  }
  const sequence = config.schedulingChoice.case === "sequenceBatching" ? config.schedulingChoice.value : undefined;
  for (const state of sequence?.state ?? []) {
    for (const initial of state.initialState) {
      const source = initial.stateData;
      if (source.case === "dataFile") modelFile("", "initial_state", source.value, "initial_state data_file");
    }
  }
}
