// Hostile bytes on REST connections, where the lean HTTP/1 path reads first: valid inference
// requests cut, mutated, repeated and split across writes at random places. Every connection must
// end (answered or closed by the server's own time limits, never left hanging), every answer must
// be a well-formed HTTP/1.1 response, and the server must serve a clean request afterwards.

import { connect } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, simpleInputs, startHttp } from "./http-fixture.js";

let server: HttpServer;
beforeAll(async () => {
  server = await startHttp({
    controlMode: "explicit",
    loadModels: ["simple"],
    http: { headerTimeoutMs: 150, idleTimeoutMs: 150, keepAliveTimeoutMs: 150, maxInputSize: 4096 },
  });
});
afterAll(() => server.close());

const BODY = JSON.stringify({ inputs: simpleInputs() });
const REQUEST = Buffer.from(
  `POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`,
  "latin1",
);

/** Write `pieces` on a new connection and collect what comes back until the server closes it (its time limits are short here). */
function exchange(pieces: readonly Buffer[]): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(server.port, "127.0.0.1", async () => {
      for (const piece of pieces) {
        await new Promise<void>((done) => socket.write(piece, () => done()));
      }
    });
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (text: string) => {
      received += text;
    });
    socket.on("error", () => undefined);
    socket.on("close", () => resolve(received));
  });
}

/** A valid request with bytes replaced, removed or inserted at random places, repeated up to three times. */
const hostile = fc
  .tuple(
    fc.array(
      fc.record({
        at: fc.nat(REQUEST.length - 1),
        kind: fc.constantFrom("replace", "remove", "insert"),
        byte: fc.integer({ min: 0, max: 255 }),
      }),
      { maxLength: 4 },
    ),
    fc.integer({ min: 1, max: 3 }),
    fc.array(fc.nat(), { maxLength: 3 }),
  )
  .map(([edits, copies, cuts]) => {
    const bytes = [...REQUEST];
    for (const { at, kind, byte } of edits) {
      const i = Math.min(at, bytes.length - 1);
      if (kind === "replace") bytes[i] = byte;
      else if (kind === "remove") bytes.splice(i, 1);
      else bytes.splice(i, 0, byte);
    }
    const one = Buffer.from(bytes);
    const all = Buffer.concat(Array.from({ length: copies }, () => one));
    const points = [...new Set(cuts.map((c) => c % all.length))].sort((a, b) => a - b);
    const pieces: Buffer[] = [];
    let from = 0;
    for (const p of points) {
      pieces.push(all.subarray(from, p));
      from = p;
    }
    pieces.push(all.subarray(from));
    return pieces.filter((p) => p.length > 0);
  });

describe("REST connections under hostile bytes", () => {
  it("end every connection, answer only with HTTP/1.1 responses, and keep serving (fast-check, 80 cases)", async () => {
    await fc.assert(
      fc.asyncProperty(hostile, async (pieces) => {
        const received = await exchange(pieces);
        for (const status of received.match(/HTTP\/1\.1 \d{3} [^\r]*\r\n/g) ?? []) {
          expect(status).toMatch(/^HTTP\/1\.1 (200|400|404|408|413|431|500|501) /);
        }
        if (received.length > 0) expect(received.startsWith("HTTP/1.1 ")).toBe(true);
        expect(received).not.toMatch(/TypeError|ReferenceError|at \w+ \(/);
      }),
      { numRuns: 80, seed: 20261206 },
    );
    const [clean] = (await exchange([REQUEST])).split("\r\n");
    expect(clean).toBe("HTTP/1.1 200 OK");
  }, 120_000);
});
