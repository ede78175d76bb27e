// The tensor-bound model of the throughput benchmark: an ONNX Identity, FP32 INPUT0 [-1] → OUTPUT0,
// max_batch_size 0. The model costs next to nothing, so each request's cost is moving and encoding
// its tensor: JSON's grows with the element count, binary's and gRPC's only with the bytes. It is
// generated at run time into a temporary model repository (never committed), removed at exit.
import { rmSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { model, mulberry32, node, OnnxType, tensorInfo } from "../../examples/scripts/onnx-builder.js";

export const IDENTITY = "identity_fp32";
/** Elements per request by default: 65,536 FP32 values, 256 KiB. */
export const IDENTITY_ELEMENTS = 65536;

/** The ONNX bytes: OUTPUT0 = Identity(INPUT0), FP32 of any length. */
export function identityOnnx(): Uint8Array {
  return model({
    name: "identity",
    doc: "OUTPUT0 = INPUT0, FP32 [n] (benchmark only)",
    inputs: [tensorInfo("INPUT0", OnnxType.FLOAT, ["n"])],
    outputs: [tensorInfo("OUTPUT0", OnnxType.FLOAT, ["n"])],
    nodes: [node("Identity", ["INPUT0"], ["OUTPUT0"])],
  });
}

const CONFIG = `name: "${IDENTITY}"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
`;

/** A temporary model repository holding only `identity_fp32`. */
export interface IdentityRepository {
  dir: string;
  remove(): Promise<void>;
}

export async function writeIdentityRepository(): Promise<IdentityRepository> {
  const dir = await mkdtemp(join(tmpdir(), "galley-bench-identity-"));
  // A backstop for exits that skip the caller's `finally` (process.exit in a handler).
  const atExit = () => rmSync(dir, { recursive: true, force: true });
  process.once("exit", atExit);
  await mkdir(join(dir, IDENTITY, "1"), { recursive: true });
  await writeFile(join(dir, IDENTITY, "1", "model.onnx"), identityOnnx());
  await writeFile(join(dir, IDENTITY, "config.pbtxt"), CONFIG);
  return {
    dir,
    remove: async () => {
      process.off("exit", atExit);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The model file inside a repository written by `writeIdentityRepository`. */
export function identityModelFile(repository: string): string {
  return join(repository, IDENTITY, "1", "model.onnx");
}

/**
 * A deterministic input of `elements` values in [-1, 1), the same for every target. Seeded
 * pseudo-random values, as a normalised image or an embedding would be: most take 17 or so
 * significant digits in JSON, so a JSON body is about 5 times the size of the tensor.
 */
export function identityInput(elements: number): Float32Array {
  const random = mulberry32(20261203);
  return Float32Array.from({ length: elements }, () => 2 * random() - 1);
}
