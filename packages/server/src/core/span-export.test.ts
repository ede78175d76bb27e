import { trace } from "@opentelemetry/api";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_OPENTELEMETRY_CONFIG } from "./opentelemetry-config.js";
import { SpanExport } from "./span-export.js";

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const SPAN = "b7ad6b7169203331";

describe("SpanExport.extract", () => {
  const spans = new SpanExport(DEFAULT_OPENTELEMETRY_CONFIG, () => {});
  afterAll(() => spans.close(1000));
  const carrier = (headers: Record<string, string>) => ({ header: (name: string) => headers[name] });

  it("reads the caller's span from traceparent and tracestate", () => {
    const context = spans.extract(carrier({ traceparent: `00-${TRACE}-${SPAN}-01`, tracestate: "a=1,b=2" }));
    const caller = context && trace.getSpanContext(context);
    expect(caller).toMatchObject({ traceId: TRACE, spanId: SPAN, traceFlags: 1, isRemote: true });
    expect(caller?.traceState?.serialize()).toBe("a=1,b=2");
    // A future version may add fields after the flags (W3C: parse the first four).
    expect(spans.extract(carrier({ traceparent: `01-${TRACE}-${SPAN}-00-more` }))).toBeDefined();
  });

  it("ignores a missing or malformed traceparent, as the W3C specification says", () => {
    const bad = [
      "",
      "00",
      `00-${TRACE}-${SPAN}`,
      `00-${TRACE}-${SPAN}-01-extra`,
      `ff-${TRACE}-${SPAN}-01`,
      `00-${"0".repeat(32)}-${SPAN}-01`,
      `00-${TRACE}-${"0".repeat(16)}-01`,
      `00-${TRACE.toUpperCase()}-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-0g`,
      `0-${TRACE}-${SPAN}-01`,
      "x".repeat(100_000),
    ];
    for (const traceparent of bad)
      expect(spans.extract(carrier({ traceparent })), traceparent.slice(0, 60)).toBeUndefined();
    expect(spans.extract(carrier({ tracestate: "a=1" }))).toBeUndefined();
  });
});
