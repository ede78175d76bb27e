// Reading an ncnn model (a .param text file and a .bin weight file) into plain arrays, for the
// layers Real-ESRGAN's compact network (SRVGGNetCompact) uses: Input, Split, Convolution, PReLU,
// PixelShuffle, Interp and BinaryOp. Anything else is refused by name.
//
// Formats (ncnn's own docs, "param and model file structure"): the .param file is a magic line
// (7767517), a line "layers blobs", then one line per layer: type, name, input count, output
// count, input blob names, output blob names, then "key=value" parameters. The .bin file holds
// each layer's weights in layer order: a Convolution's weights start with a 4-byte tag (0: float32,
// 0x01306B47: float16, padded to 4 bytes), its bias and a PReLU's slopes are raw float32.

export interface NcnnLayer {
  type: string;
  name: string;
  inputs: string[];
  outputs: string[];
  params: Map<number, number>;
  /** Convolution: [outChannels, inChannels, kernel, kernel], row-major (the ONNX layout). */
  weight?: Float32Array;
  bias?: Float32Array;
  /** PReLU: one slope per channel. */
  slope?: Float32Array;
}

const SUPPORTED = new Set(["Input", "Split", "Convolution", "PReLU", "PixelShuffle", "Interp", "BinaryOp"]);
const TAG_FLOAT16 = 0x01306b47;

export function parseParam(text: string): NcnnLayer[] {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  if (lines[0] !== "7767517") throw new Error(`not an ncnn .param file (magic '${lines[0]}')`);
  const [layerCount] = (lines[1] ?? "").split(/\s+/).map(Number);
  const layers = lines.slice(2).map((line) => {
    const f = line.split(/\s+/);
    const [type = "", name = ""] = f;
    if (!SUPPORTED.has(type)) throw new Error(`ncnn layer type '${type}' (${name}) is not supported by this converter`);
    const nIn = Number(f[2]);
    const nOut = Number(f[3]);
    const inputs = f.slice(4, 4 + nIn);
    const outputs = f.slice(4 + nIn, 4 + nIn + nOut);
    const params = new Map<number, number>();
    for (const kv of f.slice(4 + nIn + nOut)) {
      const [k, v] = kv.split("=");
      if (Number(k) < 0) throw new Error(`${name}: array parameters are not supported`);
      params.set(Number(k), Number(v));
    }
    return { type, name, inputs, outputs, params };
  });
  if (layers.length !== layerCount) throw new Error(`.param says ${layerCount} layers, has ${layers.length}`);
  return layers;
}

function float16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

/** Attach each layer's weights from the .bin bytes; throws unless every byte is used. */
export function loadWeights(layers: NcnnLayer[], bin: Uint8Array): NcnnLayer[] {
  const view = new DataView(bin.buffer, bin.byteOffset, bin.byteLength);
  let offset = 0;
  const raw = (count: number) => {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = view.getFloat32(offset + i * 4, true);
    offset += count * 4;
    return out;
  };
  const tagged = (count: number) => {
    const tag = view.getUint32(offset, true);
    offset += 4;
    if (tag === 0) return raw(count);
    if (tag !== TAG_FLOAT16) throw new Error(`unsupported ncnn weight storage tag 0x${tag.toString(16)}`);
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = float16(view.getUint16(offset + i * 2, true));
    offset += Math.ceil((count * 2) / 4) * 4;
    return out;
  };
  for (const layer of layers) {
    if (layer.type === "Convolution") {
      const outChannels = layer.params.get(0) ?? 0;
      layer.weight = tagged(layer.params.get(6) ?? 0);
      if (layer.params.get(5) === 1) layer.bias = raw(outChannels);
    } else if (layer.type === "PReLU") {
      layer.slope = raw(layer.params.get(0) ?? 1);
    }
  }
  if (offset !== bin.byteLength) throw new Error(`.bin has ${bin.byteLength} bytes, the layers use ${offset}`);
  return layers;
}
