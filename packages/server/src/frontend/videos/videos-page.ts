// The videos web page (`--videos-ui`): static files from assets/videos-page/, read once when the
// server starts and served from memory at PAGE_PATH, under a Content-Security-Policy that allows
// this origin's own script, style, fetches and the page's blob: media, and nothing else.
import { readFileSync } from "node:fs";
import { InferenceError } from "../../base/errors.js";
import type { HttpAnswer } from "../transport/http-exchange.js";

/** Where the page is served. */
export const PAGE_PATH = "/videos";

/** The page's Content-Security-Policy: nothing from elsewhere, no inline script or style. */
export const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' blob:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "form-action 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

const FILES: Record<string, { file: string; type: string }> = {
  [PAGE_PATH]: { file: "index.html", type: "text/html; charset=utf-8" },
  [`${PAGE_PATH}/`]: { file: "index.html", type: "text/html; charset=utf-8" },
  [`${PAGE_PATH}/page.js`]: { file: "page.js", type: "text/javascript; charset=utf-8" },
  [`${PAGE_PATH}/page.css`]: { file: "page.css", type: "text/css; charset=utf-8" },
  [`${PAGE_PATH}/icon.svg`]: { file: "icon.svg", type: "image/svg+xml" },
};

/** The page's files (from src/ and from dist/ alike: both are three folders below the package). */
const ASSETS = new URL("../../../assets/videos-page/", import.meta.url);

/** The page's routes. */
export interface VideosPage {
  /** Whether a request path is the page's. */
  owns(path: string): boolean;
  /** The file at `path`. @throws InferenceError NOT_FOUND_ROUTE, METHOD_NOT_ALLOWED */
  serve(method: string, path: string): HttpAnswer;
}

/** The page, its files read now. @throws Error when a file is missing (a broken install). */
export function createVideosPage(): VideosPage {
  const bodies = new Map<string, Buffer>();
  for (const { file } of Object.values(FILES)) bodies.set(file, readFileSync(new URL(file, ASSETS)));
  return {
    owns: (path) => path === PAGE_PATH || path.startsWith(`${PAGE_PATH}/`),
    serve(method, path) {
      const entry = FILES[path];
      if (!entry) throw new InferenceError("NOT_FOUND_ROUTE");
      if (method !== "GET") throw new InferenceError("METHOD_NOT_ALLOWED");
      return {
        status: 200,
        headers: {
          "Content-Type": entry.type,
          "Content-Security-Policy": PAGE_CSP,
          "X-Content-Type-Options": "nosniff",
          "Referrer-Policy": "no-referrer",
          "Cache-Control": "no-cache",
        },
        parts: [bodies.get(entry.file) as Buffer],
      };
    },
  };
}
