export { decodeGif, encodeGif } from "./gif.js";
export { readFrames, writePng } from "./frames.js";
export { type GenerateOptions, generateVideo, type Progress, upscaleVideo, type Video } from "./video.js";
export { runCli } from "./cli.js";
