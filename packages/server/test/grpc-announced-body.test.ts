// A Connect-protocol unary request on the gRPC port is not given a buffer at its Content-Length
// (src/server.ts strips the hint before connect-node, which would allocate it, up to 2 GiB, before
// reading): streams that announce 1 GiB and send one byte hold almost none of the server's
// memory, and a request whose body matches its Content-Length is answered as before.
import { connect } from "node:http2";
import { afterEach, describe, expect, it } from "vitest";
import { collector } from "../src/base/heap.js";
import { cleanup, startServer } from "./support/harness.js";

afterEach(cleanup);

const SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive";
const ANNOUNCED = 1024 * 1024 * 1024;

describe("a Connect unary request's Content-Length", () => {
  it("reserves nothing while its body has not come", async () => {
    const { grpcUrl } = await startServer();
    const session = connect(grpcUrl);
    session.on("error", () => undefined);
    try {
      for (let i = 0; i < 4; i++) {
        const stream = session.request({
          ":method": "POST",
          ":path": SERVER_LIVE,
          "content-type": "application/proto",
          "content-length": String(ANNOUNCED),
        });
        stream.on("error", () => undefined);
        stream.write(Buffer.from([0]));
      }
      // A whole request after them on the same connection: once it is answered, the server has
      // taken the four (streams are handled in the order they came).
      const live = session.request({
        ":method": "POST",
        ":path": SERVER_LIVE,
        "content-type": "application/proto",
        "content-length": "0",
      });
      const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
        let status = 0;
        const chunks: Buffer[] = [];
        live.on("response", (headers) => {
          status = Number(headers[":status"]);
        });
        live.on("data", (chunk: Buffer) => chunks.push(chunk));
        live.on("end", () => resolve({ status, body: Buffer.concat(chunks).toString("hex") }));
        live.on("error", reject);
      });
      live.end();
      // ServerLiveResponse{live: true}.
      expect(await answered).toEqual({ status: 200, body: "0801" });
      // What is left after a full collection is what the server holds; allocated at their
      // word, the four bodies alone would hold 4 GiB.
      collector()({ type: "major", execution: "sync" });
      expect(process.memoryUsage().arrayBuffers).toBeLessThan(ANNOUNCED / 2);
    } finally {
      session.destroy();
    }
  });
});
