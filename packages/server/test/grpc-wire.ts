// A gRPC client written against the gRPC-over-HTTP/2 spec with node:http2 only, independent of
// Connect: length-prefixed frames in, trailers out. Used to judge the server by another stack.
import { connect } from "node:http2";

export interface GrpcReply {
  status: number;
  message: string;
  /** Each response message's protobuf bytes. */
  messages: Uint8Array[];
}

export async function grpcCall(origin: string, path: string, request: Uint8Array): Promise<GrpcReply> {
  const session = connect(origin);
  try {
    return await new Promise<GrpcReply>((resolve, reject) => {
      session.once("error", reject);
      const stream = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc+proto",
        te: "trailers",
      });
      const frame = Buffer.alloc(5 + request.length);
      frame.writeUInt8(0, 0);
      frame.writeUInt32BE(request.length, 1);
      frame.set(request, 5);
      stream.end(frame);
      const chunks: Buffer[] = [];
      let headers: Record<string, unknown> = {};
      stream.on("response", (h) => {
        headers = h;
      });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("trailers", (trailers) => {
        headers = { ...headers, ...trailers };
      });
      stream.on("error", reject);
      stream.on("end", () => {
        const body = Buffer.concat(chunks);
        const messages: Uint8Array[] = [];
        for (let at = 0; at + 5 <= body.length; ) {
          const length = body.readUInt32BE(at + 1);
          messages.push(body.subarray(at + 5, at + 5 + length));
          at += 5 + length;
        }
        resolve({
          status: Number(headers["grpc-status"]),
          message: decodeURIComponent(String(headers["grpc-message"] ?? "")),
          messages,
        });
      });
    });
  } finally {
    session.close();
  }
}
