export { runCli } from "./cli.js";
export { readFrames, writePng } from "./frames.js";
export { decodeGif, encodeGif } from "./gif.js";
export { type GenerateOptions, generateVideo, type Progress, upscaleVideo, type Video } from "./video.js";
