// NaN and the infinities in REST JSON, as Triton writes and reads them (rapidjson with
// kWriteNanAndInfFlag and kParseNanAndInfFlag, since Triton 22.02): the bare tokens NaN, Infinity
// and -Infinity, never a truncated or otherwise broken body. Python's json.loads and Triton's
// clients read them; strict JSON parsers (JSON.parse) do not.
import { afterEach, describe, expect, it } from "vitest";
import { parseJson } from "../src/frontend/http/json-parse.js";
import { type HttpServer, postJson, startHttp } from "./http-fixture.js";

const servers: HttpServer[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe("non-finite floats in JSON", () => {
  it("are read from requests and written in replies as NaN, Infinity and -Infinity", async () => {
    const server = await startHttp({ controlMode: "explicit", loadModels: ["add_sub"] });
    servers.push(server);
    // add_sub: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32); 3e38 + 3e38 overflows FP32.
    const body =
      '{"inputs":[' +
      '{"name":"INPUT0","datatype":"FP32","shape":[4],"data":[1,NaN,-Infinity,3e38]},' +
      '{"name":"INPUT1","datatype":"FP32","shape":[4],"data":[Infinity,1,1,3e38]}]}';
    const answer = await postJson(server.port, "/v2/models/add_sub/infer", body);
    expect(answer.status).toBe(200);
    expect(answer.text).toContain(
      '"name":"OUTPUT0","datatype":"FP32","shape":[4],"data":[Infinity,NaN,-Infinity,Infinity]',
    );
    expect(answer.text).toContain(
      '"name":"OUTPUT1","datatype":"FP32","shape":[4],"data":[-Infinity,NaN,-Infinity,0.0]',
    );
    // The whole body is one JSON document in rapidjson's relaxed syntax, nothing cut off.
    expect(() => parseJson(answer.body)).not.toThrow();
    expect(() => JSON.parse(answer.text)).toThrow();

    const generated = await postJson(
      server.port,
      "/v2/models/add_sub/generate",
      '{"INPUT0":[NaN,1,2,3],"INPUT1":[0,0,0,Infinity]}',
    );
    expect(generated.status).toBe(200);
    expect(generated.text).toContain('"OUTPUT0":[NaN,1.0,2.0,Infinity]');
    expect(generated.text).toContain('"OUTPUT1":[NaN,1.0,2.0,-Infinity]');
  });
});
