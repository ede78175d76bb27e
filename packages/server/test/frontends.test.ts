import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  GRPCInferenceService,
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus,
  HealthCheckResponseSchema,
  ModelInferRequestSchema,
  ServerLiveRequestSchema,
  ServerLiveResponseSchema,
} from "@galley/proto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createServer, EXTENSIONS, type GalleyServer } from "../src/index.js";
import { grpcCall } from "./grpc-wire.js";

let server: GalleyServer;
let httpBase: string;
let grpcBase: string;

beforeEach(async () => {
  server = createServer({ http: { host: "127.0.0.1", port: 0 }, grpc: { host: "127.0.0.1", port: 0 }, metrics: false });
  const { http, grpc } = await server.listen();
  httpBase = `http://127.0.0.1:${http?.port}`;
  grpcBase = `http://127.0.0.1:${grpc?.port}`;
});

afterEach(async () => {
  await server.close();
});

describe("HTTP: KServe v2 server routes", () => {
  it("answers live and ready with 200 and an empty body", async () => {
    for (const path of ["/v2/health/live", "/v2/health/ready"]) {
      const res = await fetch(httpBase + path);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-length")).toBe("0");
      expect(await res.text()).toBe("");
    }
  });

  it("ignores the query string, as Triton's client examples rely on", async () => {
    expect((await fetch(`${httpBase}/v2/health/live?test_1=1&test_2=2`)).status).toBe(200);
  });

  it("serves server metadata as compact JSON with name 'triton' by default", async () => {
    const res = await fetch(`${httpBase}/v2`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    const text = await res.text();
    expect(text).toBe(JSON.stringify(JSON.parse(text)));
    expect(JSON.parse(text)).toMatchObject({ name: "triton", version: expect.any(String) });
    // The exact list is pinned in grpc-service.test.ts; both ports answer the same one.
    expect(JSON.parse(text).extensions).toEqual(EXTENSIONS);
  });

  it("answers unknown paths 404 and wrong methods 405 with Triton's error bodies", async () => {
    const missing = await fetch(`${httpBase}/v2/nothing`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toBe('{"error":"Not Found"}');
    const wrongMethod = await fetch(`${httpBase}/v2/health/live`, { method: "POST" });
    expect(wrongMethod.status).toBe(405);
    expect(await wrongMethod.text()).toBe('{"error":"Method Not Allowed"}');
  });

  it("reports not ready (400) once shutdown begins, while still live", async () => {
    server.core.beginShutdown();
    expect((await fetch(`${httpBase}/v2/health/ready`)).status).toBe(400);
    expect((await fetch(`${httpBase}/v2/health/live`)).status).toBe(200);
  });
});

describe("gRPC: inference.GRPCInferenceService", () => {
  it("answers ServerLive to a hand-framed HTTP/2 gRPC call (no Connect on the client side)", async () => {
    const reply = await grpcCall(
      grpcBase,
      "/inference.GRPCInferenceService/ServerLive",
      toBinary(ServerLiveRequestSchema, create(ServerLiveRequestSchema)),
    );
    expect(reply.status).toBe(0);
    expect(reply.messages).toHaveLength(1);
    expect(fromBinary(ServerLiveResponseSchema, reply.messages[0] ?? new Uint8Array()).live).toBe(true);
  });

  it("answers grpc.health.v1.Health/Check with the server's readiness", async () => {
    const check = () =>
      grpcCall(
        grpcBase,
        "/grpc.health.v1.Health/Check",
        toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema)),
      );
    const serving = await check();
    expect(fromBinary(HealthCheckResponseSchema, serving.messages[0] ?? new Uint8Array()).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    server.core.beginShutdown();
    const notServing = await check();
    expect(fromBinary(HealthCheckResponseSchema, notServing.messages[0] ?? new Uint8Array()).status).toBe(
      HealthCheckResponse_ServingStatus.NOT_SERVING,
    );
  });

  it("answers an unknown model with NOT_FOUND (5) and Triton's message", async () => {
    const reply = await grpcCall(
      grpcBase,
      "/inference.GRPCInferenceService/ModelInfer",
      toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, { modelName: "simple" })),
    );
    expect(reply.status).toBe(5);
    expect(reply.message).toBe("Request for unknown model: 'simple' is not found");
  });

  it("serves a Connect client over gRPC: live, ready, metadata, health", async () => {
    const transport = createGrpcTransport({ baseUrl: grpcBase });
    const client = createClient(GRPCInferenceService, transport);
    expect((await client.serverLive({})).live).toBe(true);
    expect((await client.serverReady({})).ready).toBe(true);
    expect((await client.serverMetadata({})).name).toBe("triton");
    const health = createClient(Health, transport);
    expect((await health.check({ service: "anything" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await client.traceSetting({})).settings.trace_mode?.value).toEqual(["triton"]);
  });
});

describe("createServer", () => {
  it("reports its --id in metadata on both frontends", async () => {
    const named = createServer({
      id: "galley-test",
      http: { host: "127.0.0.1", port: 0 },
      grpc: { host: "127.0.0.1", port: 0 },
      metrics: { host: "127.0.0.1", port: 0 },
    });
    const { http, grpc } = await named.listen();
    try {
      const body = (await (await fetch(`http://127.0.0.1:${http?.port}/v2`)).json()) as { name: string };
      expect(body.name).toBe("galley-test");
      const client = createClient(
        GRPCInferenceService,
        createGrpcTransport({ baseUrl: `http://127.0.0.1:${grpc?.port}` }),
      );
      expect((await client.serverMetadata({})).name).toBe("galley-test");
    } finally {
      await named.close();
    }
  });

  it("lets in-flight work finish: close() resolves and the ports stop accepting", async () => {
    const port = new URL(httpBase).port;
    await server.close();
    await expect(fetch(`http://127.0.0.1:${port}/v2/health/live`)).rejects.toThrow();
    server = createServer({ http: false, grpc: false, metrics: false });
  });
});
