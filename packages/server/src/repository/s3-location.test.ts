import { describe, expect, it } from "vitest";
import { objectPath } from "./s3-keys.js";
import { parseS3Location } from "./s3-location.js";

describe("parseS3Location (Triton's S3 paths)", () => {
  it("reads a bucket and a prefix, dropping extra slashes", () => {
    expect(parseS3Location("s3://bucket")).toEqual({ bucket: "bucket", prefix: "" });
    expect(parseS3Location("s3://bucket//models///v1/")).toEqual({ bucket: "bucket", prefix: "models/v1/" });
  });

  it("reads an endpoint: plain HTTP unless https:// is written", () => {
    expect(parseS3Location("s3://minio.local:9000/bucket/models")).toEqual({
      bucket: "bucket",
      prefix: "models/",
      endpoint: "http://minio.local:9000",
    });
    expect(parseS3Location("s3://http://10.0.0.1:9000/bucket")).toEqual({
      bucket: "bucket",
      prefix: "",
      endpoint: "http://10.0.0.1:9000",
    });
    expect(parseS3Location("s3://https://s3.example.com:443/my.bucket/a/b")).toEqual({
      bucket: "my.bucket",
      prefix: "a/b/",
      endpoint: "https://s3.example.com:443",
    });
  });

  it("refuses a path with no bucket, and an endpoint that does not fit the pattern", () => {
    expect(() => parseS3Location("s3://")).toThrow("Invalid bucket name: ''");
    expect(() => parseS3Location("s3:////")).toThrow("Invalid bucket name: '//'");
    expect(() => parseS3Location("s3://https://host:9000/Upper/x")).toThrow(/Invalid S3 path/);
    expect(() => parseS3Location("s3://host:port/bucket")).toThrow(/Invalid S3 path/);
    expect(() => parseS3Location("s3://bu cket/x")).toThrow("No bucket name found in path: s3://bu cket/x");
  });
});

describe("objectPath (a key's place in a model's copy)", () => {
  const folder = "/tmp/galley-s3-x/model";

  it("places ordinary keys and folder markers inside the folder", () => {
    expect(objectPath(folder, "1/model.onnx")).toEqual({ path: `${folder}/1/model.onnx` });
    expect(objectPath(folder, "1/")).toEqual({ path: `${folder}/1` });
  });

  it.each([
    ["1/../../x", "'..'"],
    ["./x", "'.'"],
    ["1//x", "empty"],
    ["/etc/passwd", "absolute"],
    ["1\\..\\x", "backslash"],
    ["1/x\0", "NUL"],
    ["../", "'..'"],
    [`${"d/".repeat(16)}x`, "deep"],
    ["x".repeat(1025), "longer"],
  ])("refuses %j", (key, why) => {
    const result = objectPath(folder, key);
    expect("problem" in result && result.problem).toContain(why);
  });
});
