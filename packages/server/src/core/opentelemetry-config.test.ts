import { describe, expect, it } from "vitest";
import { otlpUrl } from "./opentelemetry-config.js";

describe("otlpUrl", () => {
  it("adds http:// to Triton's host:port/path form and keeps a given scheme", () => {
    expect(otlpUrl("localhost:4318/v1/traces")).toBe("http://localhost:4318/v1/traces");
    expect(otlpUrl("collector:4318")).toBe("http://collector:4318");
    expect(otlpUrl("https://collector.example/v1/traces")).toBe("https://collector.example/v1/traces");
    expect(otlpUrl("[::1]:4318/v1/traces")).toBe("http://[::1]:4318/v1/traces");
  });

  it("refuses what is not an http(s) URL with a host", () => {
    for (const bad of ["", "http://", "http://[bad", "ftp://host/x", "file:///etc/passwd", "http:// spaced/x"])
      expect(() => otlpUrl(bad), bad).toThrow(/invalid OTLP\/HTTP url/);
  });
});
