#!/usr/bin/env node
// Finds libtorch for binding.gyp's galley_torch target. Prints one field:
//   found   1 when a usable libtorch was found, else 0 (the target is then left out)
//   cflags  -isystem for its include folders and -D_GLIBCXX_USE_CXX11_ABI=<its ABI>
//   libs    the link line (rpath to its lib folder; --no-as-needed so CUDA kernels register)
//   cuda    1 when that libtorch has CUDA (libtorch_cuda), else 0
//   where   a line saying which libtorch was found, for people
// Order: LIBTORCH (a libtorch folder), else the torch that `python3` (then /usr/bin/python3)
// imports, else Debian's libtorch-dev under /usr. GALLEY_TORCH=0 leaves the target out.
"use strict";
const { execFileSync } = require("node:child_process");
const { existsSync, readdirSync, readFileSync, writeFileSync } = require("node:fs");
const { join } = require("node:path");
const { tmpdir } = require("node:os");

function candidate(root, include, lib, abi, source) {
  const headers = include.find((dir) => existsSync(join(dir, "torch", "script.h")));
  if (!headers || !existsSync(join(lib, "libtorch_cpu.so"))) return undefined;
  const version = headerVersion(include);
  return {
    include,
    lib,
    abi,
    cuda: existsSync(join(lib, "libtorch_cuda.so")),
    source: `${source}${version ? `, libtorch ${version}` : ""} (${root})`,
  };
}

/**
 * The libtorch version its headers declare (torch/version.h), so that `where` (the native build's
 * cache key) changes when a folder's libtorch does, even at the same path.
 */
function headerVersion(include) {
  for (const dir of include) {
    try {
      const text = readFileSync(join(dir, "torch", "version.h"), "utf8");
      const match = /#define TORCH_VERSION\s*\\?\s*"([^"]+)"/.exec(text);
      if (match) return match[1];
    } catch {}
  }
  return undefined;
}

function fromFolder(root, abi, source) {
  return candidate(
    root,
    [join(root, "include"), join(root, "include", "torch", "csrc", "api", "include")],
    join(root, "lib"),
    abi,
    source,
  );
}

function fromPython(python) {
  const code =
    "import json,os,torch\ntry:\n import nvidia;n=list(nvidia.__path__)[0]\nexcept Exception:\n n=''\n" +
    "print(json.dumps({'dir':os.path.dirname(torch.__file__),'abi':int(torch._C._GLIBCXX_USE_CXX11_ABI)," +
    "'version':torch.__version__,'nvidia':n}))";
  try {
    const out = execFileSync(python, ["-c", code], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 60_000,
    });
    const info = JSON.parse(out.trim().split("\n").pop());
    const found = fromFolder(info.dir, info.abi, `python torch ${info.version} from ${python}`);
    if (found && info.nvidia) found.nvidia = info.nvidia;
    return found;
  } catch {
    return undefined;
  }
}

/**
 * The CUDA runtime's headers and library, for a libtorch with CUDA (the addon includes c10/cuda,
 * whose inline functions call the runtime): CUDA_HOME, /usr/local/cuda, then the NVIDIA wheels
 * next to python's torch.
 */
function cudaRuntime(found) {
  const roots = [process.env.CUDA_HOME, process.env.CUDA_PATH, "/usr/local/cuda"].filter(Boolean);
  const places = roots.map((r) => ({ include: join(r, "include"), lib: [join(r, "lib64"), join(r, "lib")] }));
  if (found.nvidia) {
    let subdirs = [];
    try {
      subdirs = readdirSync(found.nvidia);
    } catch {}
    for (const d of subdirs)
      places.push({ include: join(found.nvidia, d, "include"), lib: [join(found.nvidia, d, "lib")] });
  }
  const include = places.map((p) => p.include).find((dir) => existsSync(join(dir, "cuda_runtime_api.h")));
  for (const dir of places.flatMap((p) => p.lib)) {
    let files = [];
    try {
      files = readdirSync(dir).filter((f) => /^libcudart\.so(\.\d+)*$/.test(f));
    } catch {}
    if (files.length === 0) continue;
    const file = files.includes("libcudart.so") ? "libcudart.so" : files.sort().pop();
    return { include, lib: dir, file };
  }
  return { include, lib: undefined, file: undefined };
}

function fromDebian() {
  const triplet = ["x86_64-linux-gnu", "aarch64-linux-gnu"].find((t) => existsSync(`/usr/lib/${t}/libtorch_cpu.so`));
  if (!triplet) return undefined;
  return candidate(
    "/usr",
    ["/usr/include", "/usr/include/torch/csrc/api/include"],
    `/usr/lib/${triplet}`,
    1,
    "Debian libtorch-dev",
  );
}

function find() {
  if (process.env.GALLEY_TORCH === "0") return undefined;
  if (process.env.LIBTORCH)
    return fromFolder(process.env.LIBTORCH, Number(process.env.LIBTORCH_CXX11_ABI ?? 1), "LIBTORCH");
  return fromPython("python3") ?? fromPython("/usr/bin/python3") ?? fromDebian();
}

// gyp runs this once per field: remember the answer for a minute (importing torch takes seconds).
const key = JSON.stringify([
  process.env.GALLEY_TORCH,
  process.env.LIBTORCH,
  process.env.LIBTORCH_CXX11_ABI,
  process.env.PATH,
]);
const cache = join(tmpdir(), `galley-torch-find-${Buffer.from(key).toString("base64url").slice(-40)}.json`);
let found;
try {
  const saved = JSON.parse(readFileSync(cache, "utf8"));
  if (saved.key === key && Date.now() - saved.at < 60_000) found = saved.found ?? undefined;
} catch {}
if (found === undefined) {
  found = find() ?? null;
  if (found?.cuda) found.cudart = cudaRuntime(found);
  try {
    writeFileSync(cache, JSON.stringify({ key, at: Date.now(), found }));
  } catch {}
}

const field = process.argv[2];
const system = (dirs) => dirs.filter((d) => d !== "/usr/include").flatMap((d) => ["-isystem", d]);
const out = {
  found: () => (found ? "1" : "0"),
  cuda: () => (found?.cuda ? "1" : "0"),
  cflags: () =>
    found
      ? [
          ...system([...found.include, ...(found.cudart?.include ? [found.cudart.include] : [])]),
          `-D_GLIBCXX_USE_CXX11_ABI=${found.abi}`,
        ].join(" ")
      : "",
  libs: () =>
    found
      ? [
          `-L${found.lib}`,
          `-Wl,-rpath,${found.lib}`,
          "-Wl,--no-as-needed",
          ...(found.cuda ? ["-ltorch_cuda", "-lc10_cuda"] : []),
          "-ltorch_cpu",
          "-ltorch",
          "-lc10",
          "-Wl,--as-needed",
          ...(found.cudart?.lib
            ? [`-L${found.cudart.lib}`, `-Wl,-rpath,${found.cudart.lib}`, `-l:${found.cudart.file}`]
            : []),
        ].join(" ")
      : "",
  where: () => {
    if (!found) return "no libtorch found (LIBTORCH, python3's torch, Debian's libtorch-dev)";
    if (!found.cuda) return `${found.source}, CPU only`;
    const lib = found.cudart?.lib ? join(found.cudart.lib, found.cudart.file) : "NOT FOUND";
    return `${found.source}, with CUDA (runtime headers ${found.cudart?.include ?? "NOT FOUND"}, library ${lib})`;
  },
}[field];
if (!out) {
  console.error(`usage: torch_find.cjs found|cflags|libs|cuda|where`);
  process.exit(2);
}
process.stdout.write(`${out()}\n`);
