// An OTLP/HTTP trace receiver for the tests: a real HTTP listener on port 0 that decodes each
// export with the official OTLP protobuf definitions (test/otlp-proto, compiled by `buf build`).
import { execFileSync } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { createFileRegistry, type DescMessage, fromBinary, type JsonObject, toJson } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";

const PROTO_DIR = fileURLToPath(new URL("../otlp-proto", import.meta.url));
const BUF = fileURLToPath(new URL("../../../../node_modules/.bin/buf", import.meta.url));

let request: DescMessage | undefined;

/** ExportTraceServiceRequest, from the .proto files (compiled once per test file). */
function exportRequest(): DescMessage {
  if (request) return request;
  const set = fromBinary(FileDescriptorSetSchema, execFileSync(BUF, ["build", PROTO_DIR, "-o", "-"]));
  const found = createFileRegistry(set).getMessage("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");
  if (!found) throw new Error("ExportTraceServiceRequest is not in the OTLP definitions");
  request = found;
  return found;
}

/** One span as received. Ids are lower-case hex; times Unix-epoch nanoseconds. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** "" for a span without a parent. */
  parentSpanId: string;
  traceState: string;
  name: string;
  kind: string;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  events: { name: string; ns: bigint }[];
  /** The resource's attributes. */
  resource: Record<string, string | number | boolean>;
  /** The instrumentation scope's name. */
  scope: string;
}

export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>/v1/traces`. */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests received, and their content types. */
  contentTypes: string[];
  /** Resolves once `done(spans)` holds (checked at each export), rejects after `timeoutMs`. */
  waitFor(done: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

const hex = (base64: unknown) => Buffer.from(String(base64 ?? ""), "base64").toString("hex");

function value(any: JsonObject | undefined): string | number | boolean {
  if (!any) return "";
  if ("stringValue" in any) return String(any.stringValue);
  if ("intValue" in any) return Number(any.intValue);
  if ("boolValue" in any) return Boolean(any.boolValue);
  if ("doubleValue" in any) return Number(any.doubleValue);
  return JSON.stringify(any);
}

function attributes(list: unknown): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of (list as JsonObject[] | undefined) ?? []) out[String(kv.key)] = value(kv.value as JsonObject);
  return out;
}

function decode(body: Uint8Array): ReceivedSpan[] {
  const desc = exportRequest();
  const json = toJson(desc, fromBinary(desc, body)) as JsonObject;
  const spans: ReceivedSpan[] = [];
  for (const rs of (json.resourceSpans as JsonObject[] | undefined) ?? []) {
    const resource = attributes((rs.resource as JsonObject | undefined)?.attributes);
    for (const ss of (rs.scopeSpans as JsonObject[] | undefined) ?? []) {
      const scope = String((ss.scope as JsonObject | undefined)?.name ?? "");
      for (const s of (ss.spans as JsonObject[] | undefined) ?? []) {
        spans.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          traceState: String(s.traceState ?? ""),
          name: String(s.name),
          kind: String(s.kind ?? ""),
          startNs: BigInt(String(s.startTimeUnixNano ?? "0")),
          endNs: BigInt(String(s.endTimeUnixNano ?? "0")),
          attributes: attributes(s.attributes),
          events: ((s.events as JsonObject[] | undefined) ?? []).map((e) => ({
            name: String(e.name),
            ns: BigInt(String(e.timeUnixNano ?? "0")),
          })),
          resource,
          scope,
        });
      }
    }
  }
  return spans;
}

/**
 * Start a receiver. `status`: what it answers (200 with an empty ExportTraceServiceResponse by
 * default); `hold`: it never answers (an exporter's request then times out).
 */
export async function startOtlpReceiver(options: { status?: number; hold?: boolean } = {}): Promise<OtlpReceiver> {
  exportRequest();
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const waiters = new Set<() => void>();
  const held = new Set<ServerResponse>();
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (options.hold) {
        held.add(res);
        return;
      }
      contentTypes.push(String(req.headers["content-type"]));
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      try {
        spans.push(...decode(Buffer.concat(chunks)));
      } catch (error) {
        res.writeHead(400).end(String(error));
        return;
      }
      res.writeHead(options.status ?? 200, { "content-type": "application/x-protobuf" }).end();
      for (const wake of waiters) wake();
    });
  });
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    contentTypes,
    waitFor(done, timeoutMs = 20_000) {
      if (done(spans)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(`the receiver did not get the spans expected within ${timeoutMs} ms (${spans.length} received)`),
          );
        }, timeoutMs);
        const check = () => {
          if (!done(spans)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
      });
    },
    close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      return new Promise((done) => server.close(() => done()));
    },
  };
}
