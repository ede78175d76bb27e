import { describe, expect, it } from "vitest";
import { specPercentEncode } from "./grpc-message.js";

describe("specPercentEncode", () => {
  it("leaves printable ASCII but % as it is, and escapes the rest as UTF-8 bytes", () => {
    expect(specPercentEncode("Request for unknown model: 'a/b' version 1, x=2")).toBe(
      "Request for unknown model: 'a/b' version 1, x=2",
    );
    expect(specPercentEncode("100% é\n")).toBe("100%25 %C3%A9%0A");
  });

  it("escapes a space that starts or ends the text (HTTP/2 drops such a header value)", () => {
    expect(specPercentEncode("GPUs are: ")).toBe("GPUs are:%20");
    expect(specPercentEncode(" x y ")).toBe("%20x y%20");
    expect(specPercentEncode(" ")).toBe("%20");
    expect(decodeURIComponent(specPercentEncode(" a b "))).toBe(" a b ");
  });
});
