import { readFile } from "node:fs/promises";

/** One trace of a Triton trace file: its model, parent and timestamps (ns, as text-free bigints). */
export interface TraceRecord {
  id: number;
  model: string;
  version: number;
  parent: number;
  stamps: Map<string, bigint>;
}

/** Read a trace file (Triton's format, mode `triton`) into its traces, by id. */
export function parseTraceFile(text: string): Map<number, TraceRecord> {
  // The nanosecond values exceed 2^53: read them as text.
  const objects = JSON.parse(text.replace(/"ns":(\d+)/g, '"ns":"$1"')) as Record<string, unknown>[];
  const traces = new Map<number, TraceRecord>();
  for (const object of objects) {
    const id = Number(object.id);
    let trace = traces.get(id);
    if (!trace) {
      trace = { id, model: "", version: 0, parent: 0, stamps: new Map() };
      traces.set(id, trace);
    }
    if (typeof object.model_name === "string") {
      trace.model = object.model_name;
      trace.version = Number(object.model_version);
      trace.parent = Number(object.parent_id ?? 0);
    }
    for (const stamp of (object.timestamps as { name: string; ns: string }[] | undefined) ?? [])
      trace.stamps.set(stamp.name, BigInt(stamp.ns));
  }
  return traces;
}

const span = (t: TraceRecord, from: string, to: string): number | undefined => {
  const a = t.stamps.get(from);
  const b = t.stamps.get(to);
  return a === undefined || b === undefined ? undefined : Number(b - a) / 1000;
};

/**
 * Where requests' time went, per model (Triton's `trace_summary.py`, extended to child traces):
 * the frontend (receive and send), the request in the core, its queue and compute (input, infer,
 * output), and for a request that made child requests (ensemble steps, BLS calls) what those took
 * per request, by model, and the part of the request covered by none of them. Averages in µs.
 */
export function summarizeTraces(traces: Map<number, TraceRecord>): string {
  const children = new Map<number, TraceRecord[]>();
  for (const t of traces.values()) {
    if (t.parent === 0) continue;
    const list = children.get(t.parent) ?? [];
    list.push(t);
    children.set(t.parent, list);
  }
  const byModel = new Map<string, TraceRecord[]>();
  for (const t of traces.values()) {
    if (t.model === "") continue;
    const key = `${t.model} (${t.version})${t.parent !== 0 ? ", as a child" : ""}`;
    byModel.set(key, [...(byModel.get(key) ?? []), t]);
  }
  const lines: string[] = [];
  for (const [key, list] of [...byModel].sort(([a], [b]) => a.localeCompare(b))) {
    lines.push(`${key}: ${list.length} trace${list.length === 1 ? "" : "s"}`);
    const row = (label: string, depth: number, values: (number | undefined)[], median = false) => {
      const known = values.filter((v): v is number => v !== undefined);
      if (known.length === 0) return;
      const mean = known.reduce((a, b) => a + b, 0) / known.length;
      const sorted = median ? [...known].sort((a, b) => a - b) : [];
      const p50 = median ? `, p50 ${(sorted[sorted.length >> 1] as number).toFixed(1)} us` : "";
      lines.push(`${"  ".repeat(depth)}${label} (avg): ${mean.toFixed(1)} us${p50}`);
    };
    row(
      "HTTP request",
      1,
      list.map((t) => span(t, "HTTP_RECV_START", "HTTP_SEND_END")),
    );
    row(
      "receive",
      2,
      list.map((t) => span(t, "HTTP_RECV_START", "HTTP_RECV_END")),
    );
    row(
      "send",
      2,
      list.map((t) => span(t, "HTTP_SEND_START", "HTTP_SEND_END")),
    );
    row(
      "gRPC request",
      1,
      list.map((t) => span(t, "GRPC_WAITREAD_END", "GRPC_SEND_END")),
    );
    row(
      "send",
      2,
      list.map((t) => span(t, "GRPC_SEND_START", "GRPC_SEND_END")),
    );
    row(
      "request (core)",
      1,
      list.map((t) => span(t, "REQUEST_START", "REQUEST_END")),
    );
    row(
      "queue",
      2,
      list.map((t) => span(t, "QUEUE_START", "COMPUTE_START")),
    );
    row(
      "compute",
      2,
      list.map((t) => span(t, "COMPUTE_START", "COMPUTE_END")),
    );
    row(
      "input",
      3,
      list.map((t) => span(t, "COMPUTE_START", "COMPUTE_INPUT_END")),
    );
    row(
      "infer",
      3,
      list.map((t) => span(t, "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START")),
    );
    row(
      "output",
      3,
      list.map((t) => span(t, "COMPUTE_OUTPUT_START", "COMPUTE_END")),
    );
    const idle = idleGaps(list);
    if (idle.length > 0) row(`idle between its requests (${idle.length} gaps)`, 1, idle, true);
    const parents = list.filter((t) => children.has(t.id));
    if (parents.length === 0) continue;
    const perModel = new Map<string, { us: number; calls: number }>();
    const uncovered: Uncovered[] = [];
    for (const parent of parents) {
      const kids = children.get(parent.id) ?? [];
      for (const kid of kids) {
        const entry = perModel.get(kid.model) ?? { us: 0, calls: 0 };
        entry.us += span(kid, "REQUEST_START", "REQUEST_END") ?? 0;
        entry.calls++;
        perModel.set(kid.model, entry);
      }
      const outside = uncoveredUs(parent, kids);
      if (outside !== undefined) uncovered.push(outside);
    }
    lines.push(`  child requests, per ${key.split(" ")[0]} request:`);
    for (const [model, { us, calls }] of [...perModel].sort(([a], [b]) => a.localeCompare(b)))
      lines.push(`    ${model}: ${(calls / parents.length).toFixed(1)} calls, ${(us / parents.length).toFixed(1)} us`);
    row(
      "in no child request",
      2,
      uncovered.map((u) => u.before + u.between + u.after),
    );
    row(
      "before the first",
      3,
      uncovered.map((u) => u.before),
    );
    row(
      "between them",
      3,
      uncovered.map((u) => u.between),
    );
    row(
      "after the last",
      3,
      uncovered.map((u) => u.after),
    );
  }
  return lines.join("\n");
}

/**
 * The model's idle stretches between its traced requests (none in flight), µs: for a model whose
 * calls follow one another (a pipeline's steps in lockstep), the time the caller took between them.
 */
function idleGaps(list: readonly TraceRecord[]): number[] {
  const spans = list
    .map((t) => [t.stamps.get("REQUEST_START"), t.stamps.get("REQUEST_END")] as const)
    .filter((s): s is readonly [bigint, bigint] => s[0] !== undefined && s[1] !== undefined)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const gaps: number[] = [];
  let reach = spans[0]?.[1];
  for (const [a, b] of spans.slice(1)) {
    if (reach !== undefined && a > reach) gaps.push(Number(a - reach) / 1000);
    if (reach === undefined || b > reach) reach = b;
  }
  return gaps;
}

/** The parts of a request's core time (REQUEST_START to REQUEST_END) no child request covers, µs. */
interface Uncovered {
  before: number;
  between: number;
  after: number;
}

function uncoveredUs(parent: TraceRecord, kids: readonly TraceRecord[]): Uncovered | undefined {
  const start = parent.stamps.get("REQUEST_START");
  const end = parent.stamps.get("REQUEST_END");
  if (start === undefined || end === undefined) return undefined;
  const spans = kids
    .map((k) => [k.stamps.get("REQUEST_START"), k.stamps.get("REQUEST_END")] as const)
    .filter((s): s is readonly [bigint, bigint] => s[0] !== undefined && s[1] !== undefined)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  if (spans.length === 0) return { before: Number(end - start) / 1000, between: 0, after: 0 };
  let between = 0n;
  let reach = spans[0]?.[0] ?? start;
  for (const [a, b] of spans) {
    if (a > reach) between += a - reach;
    if (b > reach) reach = b;
  }
  const first = spans[0]?.[0] ?? start;
  return {
    before: Number(first > start ? first - start : 0n) / 1000,
    between: Number(between) / 1000,
    after: Number(end > reach ? end - reach : 0n) / 1000,
  };
}

/** `galley trace-summary <file>...`: print {@link summarizeTraces} of each file. */
export async function traceSummary(args: string[]): Promise<number> {
  if (args.length === 0 || args.includes("--help")) {
    (args.length === 0 ? process.stderr : process.stdout).write(
      "Usage: galley trace-summary <trace file>...\n\nSummarize the traces of a trace file written with --trace-config (mode triton).\n",
    );
    return args.length === 0 ? 1 : 0;
  }
  for (const file of args) {
    let traces: Map<number, TraceRecord>;
    try {
      traces = parseTraceFile(await readFile(file, "utf8"));
    } catch (error) {
      process.stderr.write(`error: cannot read trace file '${file}': ${(error as Error).message}\n`);
      return 1;
    }
    process.stdout.write(`File: ${file}\n${summarizeTraces(traces)}\n`);
  }
  return 0;
}
