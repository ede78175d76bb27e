import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { checkEndpoints, EndpointError } from "./endpoint-error.js";

const errno = (code: string, message = code) => Object.assign(new Error(message), { code });

describe("EndpointError", () => {
  it("words each bind failure as Triton's start-up line", () => {
    expect(new EndpointError("http", "0.0.0.0", 8000, errno("EADDRINUSE")).message).toBe(
      "failed to start HTTP service: Unavailable - Socket '0.0.0.0:8000' already in use",
    );
    expect(new EndpointError("grpc", "0.0.0.0", 80, errno("EACCES")).message).toBe(
      "failed to start GRPC service: Unavailable - Socket '0.0.0.0:80': permission denied (ports below 1024 need privileges)",
    );
    const unknown = new EndpointError("metrics", "nohost", 8002, errno("ENOTFOUND"));
    expect(unknown.message).toBe(
      "failed to start Metrics service: Unavailable - Socket 'nohost:8002': unknown host 'nohost'",
    );
    expect(unknown.addressProblem).toBe(true);
    expect(new EndpointError("http", "h", 1, errno("EPIPE", "odd")).message).toMatch(/Socket 'h:1': odd$/);
  });
});

describe("checkEndpoints", () => {
  it("resolves with every port free again, and reports a port two endpoints share as the later one's", async () => {
    await checkEndpoints([
      { endpoint: "grpc", host: "127.0.0.1", port: 0 },
      { endpoint: "http", host: "127.0.0.1", port: 0 },
    ]);
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const { port } = probe.address() as { port: number };
    await new Promise((resolve) => probe.close(resolve));
    const shared = checkEndpoints([
      { endpoint: "grpc", host: "127.0.0.1", port },
      { endpoint: "http", host: "127.0.0.1", port },
    ]);
    await expect(shared).rejects.toMatchObject({ endpoint: "http", code: "EADDRINUSE", port });
    // The gRPC probe was closed again: the port can be bound.
    const again = createServer();
    await new Promise<void>((resolve) => again.listen(port, "127.0.0.1", resolve));
    await new Promise((resolve) => again.close(resolve));
  });
});
