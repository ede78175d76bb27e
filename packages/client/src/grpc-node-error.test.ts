import { constants } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { connectErrorFromNode, connectErrorFromResetCode, webHeaders } from "./grpc-node-error.js";

const nodeError = (code: string, message = code) => Object.assign(new Error(message), { code });

describe("connectErrorFromNode", () => {
  it("keeps a ConnectError, and maps Node's codes as connect-node does, keeping the cause", () => {
    const own = new ConnectError("mine", Code.Aborted);
    expect(connectErrorFromNode(own)).toBe(own);
    const refused = nodeError("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:1");
    const error = connectErrorFromNode(refused);
    expect([error.code, error.rawMessage, error.cause]).toEqual([Code.Unavailable, refused.message, refused]);
    expect(connectErrorFromNode(nodeError("ECONNRESET")).code).toBe(Code.Aborted);
    expect(connectErrorFromNode(nodeError("ERR_STREAM_WRITE_AFTER_END")).code).toBe(Code.Aborted);
    expect(connectErrorFromNode(new Error("wrapped", { cause: nodeError("ENOTFOUND") })).code).toBe(Code.Unavailable);
    expect(connectErrorFromNode(new Error("other")).code).toBe(Code.Internal);
  });

  it("reads an abort signal's reason: AbortError and TimeoutError as CANCELED", () => {
    const aborted = connectErrorFromNode(AbortSignal.abort().reason);
    expect([aborted.code, aborted.rawMessage]).toEqual([Code.Canceled, "This operation was aborted"]);
    expect(connectErrorFromNode(new DOMException("late", "TimeoutError")).code).toBe(Code.Canceled);
  });
});

describe("connectErrorFromResetCode", () => {
  it("maps RST_STREAM codes to gRPC codes, and none for NO_ERROR", () => {
    expect(connectErrorFromResetCode(constants.NGHTTP2_NO_ERROR)).toBeUndefined();
    expect(connectErrorFromResetCode(undefined)).toBeUndefined();
    const cancel = connectErrorFromResetCode(constants.NGHTTP2_CANCEL);
    expect([cancel?.code, cancel?.rawMessage]).toEqual([
      Code.Canceled,
      "http/2 stream closed with error code CANCEL (0x8)",
    ]);
    expect(connectErrorFromResetCode(constants.NGHTTP2_REFUSED_STREAM)?.code).toBe(Code.Unavailable);
    expect(connectErrorFromResetCode(constants.NGHTTP2_ENHANCE_YOUR_CALM)?.code).toBe(Code.ResourceExhausted);
  });
});

describe("webHeaders", () => {
  it("joins header sets, repeats list values and leaves out pseudo-headers", () => {
    const headers = webHeaders({ ":status": "200", a: "1", b: ["2", "3"] }, { c: "4" }, undefined);
    expect([...headers.entries()]).toEqual([
      ["a", "1"],
      ["b", "2, 3"],
      ["c", "4"],
    ]);
  });
});
