// `galley perf` end to end against a real Galley server serving the example repository: a
// concurrency sweep over gRPC and HTTP, batches, system shared memory (and nothing left in
// /dev/shm), a fixed request rate, perf_analyzer JSON input data, the CSV and SVG files, errors,
// and the two ways to start it (`galley perf`, `galley-perf`).
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGrpcClient, SHM_ROOT } from "../src/index.js";
import { csvHeader, runPerf } from "../src/perf/index.js";

const EXAMPLES = new URL("../../../examples/model_repository", import.meta.url).pathname;
const GALLEY = new URL("../../server/dist/cli/galley.js", import.meta.url).pathname;
const GALLEY_PERF = new URL("../dist/perf/bin.js", import.meta.url).pathname;
const run = promisify(execFile);

let server: GalleyServer;
let grpcUrl: string;
let httpUrl: string;
let dir: string;

beforeAll(async () => {
  server = createServer({
    modelRepositories: [EXAMPLES],
    controlMode: "explicit",
    loadModels: ["simple", "mlp_classifier"],
    allowClientShm: true,
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { grpc, http } = await server.listen();
  grpcUrl = `127.0.0.1:${grpc?.port}`;
  httpUrl = `127.0.0.1:${http?.port}`;
  dir = await mkdtemp(join(tmpdir(), "galley-perf-"));
}, 60_000);

afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** Short windows: three of 300 ms per level, whether or not they agree. */
const FAST = ["--measurement-interval", "300", "--max-trials", "3"];

async function perf(args: string[]) {
  let stdout = "";
  let stderr = "";
  const code = await runPerf([...FAST, ...args], {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
  });
  return { code, stdout, stderr };
}

type Row = Record<string, string>;

function parseCsv(text: string): { header: string[]; rows: Row[] } {
  const [head, ...lines] = text.trimEnd().split("\n");
  const header = (head ?? "").split(",");
  const rows = lines.map((line) => {
    const cells = line.split(",");
    expect(cells).toHaveLength(header.length);
    return Object.fromEntries(header.map((h, i) => [h, cells[i] ?? ""]));
  });
  return { header, rows };
}

/** Tags balance (a well-formed XML skeleton), and each polyline has one point per row. */
function checkSvg(svg: string, rows: number): void {
  expect(svg.startsWith("<svg ")).toBe(true);
  expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
  const stack: string[] = [];
  for (const [, close, name, selfClosing] of svg.matchAll(/<(\/?)([a-zA-Z]+)[^>]*?(\/?)>/g)) {
    if (selfClosing) continue;
    if (close) expect(stack.pop()).toBe(name);
    else stack.push(name as string);
  }
  expect(stack).toEqual([]);
  expect(svg).not.toMatch(/&(?!#\d+;|amp;|lt;|gt;|quot;|apos;)/);
  const polylines = [...svg.matchAll(/<polyline class="(\w+)"[^>]* points="([^"]*)"/g)];
  expect(polylines.map((m) => m[1])).toEqual(["p50", "p99", "throughput"]);
  for (const m of polylines) {
    const points = (m[2] ?? "").split(" ");
    expect(points).toHaveLength(rows);
    for (const p of points) expect(p).toMatch(/^\d+(\.\d+)?,\d+(\.\d+)?$/);
  }
}

function checkRow(row: Row, batch = 1): void {
  expect(Number(row["Inferences/Second"])).toBeGreaterThan(0);
  for (const column of [
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
  ]) {
    expect(Number(row[column]), column).toBeGreaterThanOrEqual(0);
  }
  const p = ["p50 latency", "p90 latency", "p95 latency", "p99 latency"].map((c) => Number(row[c]));
  expect(p[0]).toBeGreaterThan(0);
  expect([...p].sort((a, b) => a - b)).toEqual(p);
  expect(Number(row["Avg Batch Size"])).toBeGreaterThanOrEqual(batch);
  for (const blank of ["Client Send", "Client Recv", "request/response", "response wait"]) expect(row[blank]).toBe("");
}

const ownRegions = async () => (await readdir(SHM_ROOT)).filter((f) => f.startsWith(`galley-${process.pid}-`));

describe("galley perf", () => {
  it("sweeps concurrency over gRPC and writes the CSV and the SVG chart", async () => {
    const csv = join(dir, "grpc.csv");
    const { code, stdout, stderr } = await perf([
      "-m",
      "simple",
      "-u",
      grpcUrl,
      "--concurrency-range",
      "1:2",
      "-f",
      csv,
    ]);
    expect(stderr).not.toContain("error");
    expect(code).toBe(0);
    expect(stderr.match(/^Concurrency \d, window \d: .* infer\/s/gm)).toHaveLength(6);
    expect(stdout).toContain("Request concurrency: 1");
    expect(stdout).toContain("Request concurrency: 2");
    expect(stdout).toMatch(/Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec/);
    expect(stdout).toContain("Inferences/Second vs. Client Average Batch Latency");
    const { header, rows } = parseCsv(await readFile(csv, "utf8"));
    expect(header).toEqual(csvHeader("concurrency"));
    expect(rows.map((r) => r.Concurrency)).toEqual(["1", "2"]);
    for (const row of rows) checkRow(row);
    checkSvg(await readFile(join(dir, "grpc.svg"), "utf8"), 2);
  });

  it("sends batches over HTTP to a dynamically batched model", async () => {
    const csv = join(dir, "http.csv");
    const args = [
      "-m",
      "mlp_classifier",
      "-i",
      "http",
      "-u",
      httpUrl,
      "-b",
      "2",
      "--concurrency-range",
      "4",
      "-f",
      csv,
    ];
    const { code, stderr } = await perf(args);
    expect(stderr).not.toContain("error");
    expect(code).toBe(0);
    const { rows } = parseCsv(await readFile(csv, "utf8"));
    expect(rows).toHaveLength(1);
    // Every request carries 2 rows, so the server's batches hold at least 2.
    checkRow(rows[0] as Row, 2);
    checkSvg(await readFile(join(dir, "http.svg"), "utf8"), 1);
  });

  it.each(["grpc", "http"])(
    "puts inputs and outputs in system shared memory over %s, and leaves none behind",
    async (protocol) => {
      const csv = join(dir, `shm-${protocol}.csv`);
      const url = protocol === "grpc" ? grpcUrl : httpUrl;
      const args = ["-m", "simple", "-i", protocol, "-u", url, "--shared-memory", "system", "-f", csv];
      const { code, stdout, stderr } = await perf(args);
      expect(stderr).not.toContain("error");
      expect(code).toBe(0);
      expect(stdout).toContain("system shared memory");
      checkRow(parseCsv(await readFile(csv, "utf8")).rows[0] as Row);
      expect(await ownRegions()).toEqual([]);
      expect(await createGrpcClient({ baseUrl: `http://${grpcUrl}` }).systemSharedMemoryStatus()).toEqual([]);
    },
  );

  it("holds a fixed request rate (open loop)", async () => {
    const csv = join(dir, "rate.csv");
    const args = ["-m", "simple", "-u", grpcUrl, "--request-rate-range", "40:80:40", "-f", csv];
    const { code, stdout, stderr } = await perf(args);
    expect(stderr).not.toContain("error");
    expect(code).toBe(0);
    expect(stdout).toContain("Request Rate: 40 inference requests per seconds");
    const { header, rows } = parseCsv(await readFile(csv, "utf8"));
    expect(header[0]).toBe("Request Rate");
    expect(rows.map((r) => r["Request Rate"])).toEqual(["40", "80"]);
    for (const row of rows) {
      checkRow(row);
      // An open loop sends on schedule: what is served tracks the rate asked for, not the latency.
      const rate = Number(row["Request Rate"]);
      expect(Number(row["Inferences/Second"])).toBeGreaterThan(rate * 0.4);
      expect(Number(row["Inferences/Second"])).toBeLessThan(rate * 1.6);
    }
    checkSvg(await readFile(join(dir, "rate.svg"), "utf8"), 2);
  });

  it("sends the entries of a perf_analyzer JSON input file", async () => {
    const file = join(dir, "input.json");
    const row = (v: number) => Array.from({ length: 16 }, (_, i) => v + i);
    await writeFile(
      file,
      JSON.stringify({
        data: [
          { INPUT0: row(0), INPUT1: row(100) },
          { INPUT0: { content: row(5), shape: [16] }, INPUT1: row(7) },
        ],
      }),
    );
    const { code, stdout, stderr } = await perf(["-m", "simple", "-u", grpcUrl, "--input-data", file, "--quiet"]);
    expect(stderr).toBe("");
    expect(code).toBe(0);
    expect(stdout).toContain("Request concurrency: 1");

    await writeFile(file, JSON.stringify({ data: [{ INPUT0: row(0) }] }));
    const missing = await perf(["-m", "simple", "-u", grpcUrl, "--input-data", file]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("data[0]: no value for input 'INPUT1'");
  });

  it("fails with one clear line: unknown model, unreachable server, bad flags", async () => {
    const unknown = await perf(["-m", "nope", "-u", grpcUrl]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^error: cannot get the metadata of model 'nope'/);
    const unreachable = await perf(["-m", "simple", "-i", "http", "-u", "127.0.0.1:1"]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(
      /^error: cannot get the metadata of model 'simple' from http http:\/\/127\.0\.0\.1:1/,
    );
    const usage = await perf(["-m", "simple", "--concurrency-range", "0"]);
    expect(usage.code).toBe(1);
    expect(usage.stderr).toContain("invalid value for --concurrency-range");
    expect(usage.stderr).toContain("Usage: galley perf");
    const tooBig = await perf(["-m", "simple", "-u", grpcUrl, "-b", "9"]);
    expect(tooBig.code).toBe(1);
    expect(tooBig.stderr).toContain("max_batch_size 8");
  });

  it("starts as `galley perf` and as `galley-perf`", async () => {
    for (const [script, prefix] of [
      [GALLEY, ["perf"]],
      [GALLEY_PERF, []],
    ] as const) {
      const help = await run(process.execPath, [script, ...prefix, "--help"]);
      expect(help.stdout).toContain("Usage: galley perf -m <model>");
    }
    const { stdout } = await run(process.execPath, [
      GALLEY,
      "perf",
      ...FAST,
      "-m",
      "simple",
      "-i",
      "http",
      "-u",
      httpUrl,
    ]);
    expect(stdout).toContain("Inferences/Second vs. Client Average Batch Latency");
  });
});
