// Mistakes galley-video finds on this machine (paths, formats, an address that is not a gRPC
// port): reported as what they are, before any server work where they can be, never as
// "the pipeline failed on the server".
import { accessSync, closeSync, constants, openSync, readdirSync, readSync, statSync } from "node:fs";
import { dirname, extname, resolve } from "node:path";

/** A local mistake: its message is the whole line; `exitCode` 2 for an argument, 1 for the rest. */
export class LocalError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 = 2,
  ) {
    super(message);
    this.name = "LocalError";
  }
}

/**
 * `--out`: a file name ending in one of `extensions` (the gRPC path writes GIFs only; `--async`
 * downloads the server's MP4 or GIF) in a folder that exists and can be written.
 */
export function checkOut(path: string, extensions: readonly string[] = [".gif"]): void {
  const names = extensions.join(" or ");
  const existing = statSync(path, { throwIfNoEntry: false });
  if (existing?.isDirectory()) throw new LocalError(`--out ${path} is a folder; give a file name ending in ${names}`);
  const extension = extname(path).toLowerCase();
  if (!extensions.includes(extension))
    throw new LocalError(
      (extensions.length === 1
        ? `--out ${path}: galley-video writes animated GIFs only; give a file name ending in .gif`
        : `--out ${path}: give a file name ending in ${names}`) + (extension ? ` (not ${extension})` : ""),
    );
  const folder = dirname(resolve(path));
  const info = statSync(folder, { throwIfNoEntry: false });
  if (!info) throw new LocalError(`--out ${path}: the folder ${folder} does not exist`);
  if (!info.isDirectory()) throw new LocalError(`--out ${path}: ${folder} is not a folder`);
  try {
    accessSync(existing ? path : folder, constants.W_OK);
  } catch {
    throw new LocalError(`--out ${path}: ${existing ? "the file" : `the folder ${folder}`} is not writable`);
  }
}

/** `--preview-dir`: a folder that exists or can be made (by writePng, later), and can be written. */
export function checkPreviewDir(path: string): void {
  let folder = resolve(path);
  let info = statSync(folder, { throwIfNoEntry: false });
  while (!info && dirname(folder) !== folder) {
    folder = dirname(folder);
    info = statSync(folder, { throwIfNoEntry: false });
  }
  if (!info?.isDirectory()) throw new LocalError(`--preview-dir ${path}: ${folder} is not a folder`);
  try {
    accessSync(folder, constants.W_OK);
  } catch {
    throw new LocalError(`--preview-dir ${path}: the folder ${folder} is not writable`);
  }
}

const GIF_MAGIC = ["GIF87a", "GIF89a"];
const PNG_MAGIC = "\x89PNG\r\n\x1a\n";

/** `--input`: a GIF (by its first bytes, whatever its name) or a folder holding .png files. */
export function checkInput(path: string): void {
  const info = statSync(path, { throwIfNoEntry: false });
  if (!info) throw new LocalError(`--input ${path}: no such file or folder`);
  if (info.isDirectory()) {
    let files: string[];
    try {
      files = readdirSync(path).filter((f) => f.toLowerCase().endsWith(".png"));
    } catch (error) {
      throw new LocalError(`--input ${path}: cannot read the folder (${(error as Error).message})`);
    }
    if (files.length === 0) throw new LocalError(`--input ${path}: the folder has no .png files`);
    for (const file of files)
      if (head(`${path}/${file}`, 8) !== PNG_MAGIC) throw new LocalError(`--input ${path}: ${file} is not a PNG image`);
    return;
  }
  const magic = head(path, 6);
  if (!GIF_MAGIC.includes(magic))
    throw new LocalError(
      `--input ${path} is not a GIF (a GIF starts with GIF87a or GIF89a); give a .gif file or a folder of .png frames`,
    );
}

/** The first `n` bytes of a file, as latin1 text; a file that cannot be read is a LocalError. */
function head(path: string, n: number): string {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new LocalError(`--input ${path}: cannot read it (${code === "EACCES" ? "permission denied" : code})`);
  }
  try {
    const bytes = Buffer.alloc(n);
    const read = readSync(fd, bytes, 0, n, 0);
    return bytes.subarray(0, read).toString("latin1");
  } finally {
    closeSync(fd);
  }
}
