import { Code, ConnectError } from "@connectrpc/connect";
import { createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGrpcClient, type GrpcProtocol } from "../src/index.js";

let server: GalleyServer;
let baseUrl: string;

beforeAll(async () => {
  server = createServer({ id: "client-test", http: false, grpc: { host: "127.0.0.1", port: 0 }, metrics: false });
  const { grpc } = await server.listen();
  baseUrl = `http://127.0.0.1:${grpc?.port}`;
});

afterAll(async () => {
  await server.close();
});

describe.each<GrpcProtocol>(["grpc", "connect", "grpc-web"])(
  "createGrpcClient over %s against a Galley server",
  (protocol) => {
    it("reads liveness, readiness, health and metadata", async () => {
      const client = createGrpcClient({ baseUrl, protocol });
      expect(await client.isServerLive()).toBe(true);
      expect(await client.isServerReady()).toBe(true);
      expect(await client.isServing()).toBe(true);
      const metadata = await client.serverMetadata();
      expect(metadata.name).toBe("client-test");
      expect(metadata.version).toMatch(/^\d+\.\d+\.\d+/);
    });

    it("surfaces server errors as ConnectError with the gRPC code", async () => {
      const client = createGrpcClient({ baseUrl, protocol });
      const error = await client.service.modelInfer({ modelName: "simple" }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code).toBe(Code.NotFound);
    });
  },
);

describe("createGrpcClient", () => {
  it("rejects an unknown protocol at construction", () => {
    expect(() => createGrpcClient({ baseUrl, protocol: "http3" as GrpcProtocol })).toThrow(/unknown protocol 'http3'/);
  });

  it("reports an unreachable server as UNAVAILABLE", async () => {
    const closed = createServer({ http: false, grpc: { host: "127.0.0.1", port: 0 }, metrics: false });
    const { grpc } = await closed.listen();
    await closed.close();
    const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` });
    const error = await client.isServerLive().catch((e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.Unavailable);
  });
});
