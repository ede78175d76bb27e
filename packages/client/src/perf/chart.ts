// A self-contained SVG chart of a sweep (no dependencies, no scripts, no external fonts): latency
// (p50, p99) against throughput, and throughput against the average batch the server formed.
import type { LevelResult } from "./measure.js";
import type { LoadMode } from "./options.js";
import { levelName } from "./report.js";

const WIDTH = 980;
const HEIGHT = 440;
const PANEL = { width: 370, height: 300, top: 80 };
const LEFTS = [80, 580];
/** Room above the largest value, so no point sits on the frame. */
const HEADROOM = 1.08;

interface Series {
  name: string;
  className: string;
  color: string;
  points: { x: number; y: number; label: string }[];
}

/** Escape text for XML content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Round-number ticks from 0 to at least `max`: steps of 1, 2 or 5 × 10^k, about five of them. */
export function ticks(max: number): number[] {
  const top = max > 0 && Number.isFinite(max) ? max : 1;
  const raw = top / 5;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * magnitude >= raw) ?? 10) * magnitude;
  const out: number[] = [];
  for (let i = 0; out.length === 0 || (out[out.length - 1] as number) < top; i++)
    out.push(Number((i * step).toPrecision(12)));
  return out;
}

const fmt = (n: number) => (Math.abs(n) >= 1000 ? n.toLocaleString("en-US", { maximumFractionDigits: 0 }) : String(n));
const xy = (n: number) => n.toFixed(1);

function panel(left: number, title: string, xLabel: string, yLabel: string, series: Series[]): string {
  const all = series.flatMap((s) => s.points);
  const xTicks = ticks(Math.max(...all.map((p) => p.x), 0) * HEADROOM);
  const yTicks = ticks(Math.max(...all.map((p) => p.y), 0) * HEADROOM);
  const xMax = xTicks[xTicks.length - 1] as number;
  const yMax = yTicks[yTicks.length - 1] as number;
  const { width, height, top } = PANEL;
  const sx = (x: number) => left + (x / xMax) * width;
  const sy = (y: number) => top + height - (y / yMax) * height;
  const out: string[] = [`<g class="panel">`];
  out.push(`<text class="title" x="${xy(left + width / 2)}" y="${top - 30}">${escapeXml(title)}</text>`);
  for (const t of xTicks) {
    out.push(`<line class="grid" x1="${xy(sx(t))}" y1="${top}" x2="${xy(sx(t))}" y2="${top + height}"/>`);
    out.push(`<text class="tick" x="${xy(sx(t))}" y="${top + height + 18}">${fmt(t)}</text>`);
  }
  for (const t of yTicks) {
    out.push(`<line class="grid" x1="${left}" y1="${xy(sy(t))}" x2="${left + width}" y2="${xy(sy(t))}"/>`);
    out.push(`<text class="tick y" x="${left - 8}" y="${xy(sy(t) + 4)}">${fmt(t)}</text>`);
  }
  out.push(`<rect class="frame" x="${left}" y="${top}" width="${width}" height="${height}"/>`);
  out.push(`<text class="label" x="${xy(left + width / 2)}" y="${top + height + 42}">${escapeXml(xLabel)}</text>`);
  out.push(
    `<text class="label" transform="translate(${left - 56} ${xy(top + height / 2)}) rotate(-90)">${escapeXml(yLabel)}</text>`,
  );
  series.forEach((s, i) => {
    const points = s.points.map((p) => `${xy(sx(p.x))},${xy(sy(p.y))}`).join(" ");
    out.push(`<polyline class="${s.className}" fill="none" stroke="${s.color}" stroke-width="2" points="${points}"/>`);
    for (const p of s.points) {
      out.push(
        `<circle class="${s.className}" cx="${xy(sx(p.x))}" cy="${xy(sy(p.y))}" r="3.5" fill="${s.color}">` +
          `<title>${escapeXml(`${s.name}, ${p.label}: x ${p.x.toFixed(2)}, y ${p.y.toFixed(2)}`)}</title></circle>`,
      );
      if (i === 0)
        out.push(`<text class="point" x="${xy(sx(p.x) + 6)}" y="${xy(sy(p.y) - 6)}">${escapeXml(p.label)}</text>`);
    }
    const ly = top - 12;
    const lx = left + i * 110;
    out.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 20}" y2="${ly}" stroke="${s.color}" stroke-width="2"/>`);
    out.push(`<text class="legend" x="${lx + 26}" y="${ly + 4}">${escapeXml(s.name)}</text>`);
  });
  out.push("</g>");
  return out.join("\n");
}

/**
 * The sweep as an SVG document: on the left, client p50 and p99 latency (ms) against throughput
 * (infer/s), one point per level, labelled with the level; on the right, throughput against the
 * average batch size the server formed.
 */
export function renderChart(model: string, mode: LoadMode["kind"], results: LevelResult[]): string {
  const label = (r: LevelResult) => `${mode === "concurrency" ? "c" : "r"}=${r.level}`;
  const latency: Series[] = [
    {
      name: "p50 latency",
      className: "p50",
      color: "#1f77b4",
      points: results.map((r) => ({ x: r.throughput, y: r.latency.p50 / 1000, label: label(r) })),
    },
    {
      name: "p99 latency",
      className: "p99",
      color: "#d62728",
      points: results.map((r) => ({ x: r.throughput, y: r.latency.p99 / 1000, label: label(r) })),
    },
  ];
  const batching: Series[] = [
    {
      name: "throughput",
      className: "throughput",
      color: "#2ca02c",
      points: results.map((r) => ({ x: r.server.averageBatchSize, y: r.throughput, label: label(r) })),
    },
  ];
  const heading = `galley perf: ${model}, ${levelName(mode).toLowerCase()} ${results.map((r) => r.level).join(", ")}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif">`,
    "<style>",
    ".title{font-size:14px;font-weight:bold;text-anchor:middle}",
    ".label{font-size:12px;text-anchor:middle}",
    ".tick{font-size:10px;text-anchor:middle;fill:#444}",
    ".tick.y{text-anchor:end}",
    ".legend{font-size:11px}",
    ".point{font-size:9px;fill:#555}",
    ".grid{stroke:#e5e5e5;stroke-width:1}",
    ".frame{fill:none;stroke:#888;stroke-width:1}",
    "</style>",
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#fff"/>`,
    `<text class="title" x="${WIDTH / 2}" y="22">${escapeXml(heading)}</text>`,
    panel(LEFTS[0] as number, "Latency vs throughput", "throughput (infer/s)", "client latency (ms)", latency),
    panel(
      LEFTS[1] as number,
      "Throughput vs batch size",
      "average batch size (server)",
      "throughput (infer/s)",
      batching,
    ),
    "</svg>",
    "",
  ].join("\n");
}
