import { describe, expect, it } from "vitest";
import { isPrivateAddress, MAX_WEBHOOK_URL_LENGTH, publicLookup, webhookUrlProblem } from "./webhook-target.js";

describe("webhook targets", () => {
  it("tells private, loopback, link-local and reserved addresses from public ones", () => {
    for (const address of [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::1",
      "::",
      "fc00::1",
      "fd12::1",
      "fe80::1",
      "::ffff:127.0.0.1",
      "::ffff:10.0.0.1",
      "not an address",
    ]) {
      expect(isPrivateAddress(address), address).toBe(true);
    }
    for (const address of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]) {
      expect(isPrivateAddress(address), address).toBe(false);
    }
  });

  it("accepts absolute http(s) URLs to public hosts only, unless private ones are allowed", () => {
    expect(webhookUrlProblem("https://hooks.example.com/video?x=1", false)).toBeUndefined();
    expect(webhookUrlProblem("http://8.8.8.8:8080/", false)).toBeUndefined();
    const refused: [string, RegExp][] = [
      ["not a url", /absolute URL/],
      ["/relative", /absolute URL/],
      ["ftp://example.com/", /http or https/],
      ["file:///etc/passwd", /http or https/],
      ["javascript:alert(1)", /http or https/],
      ["https://user:pass@example.com/", /credentials/],
      ["http://127.0.0.1/", /private/],
      ["http://[::1]:8080/", /private/],
      ["http://localhost/", /private/],
      ["http://metadata.localhost/", /private/],
      ["http://169.254.169.254/latest/meta-data", /private/],
      ["http://0x7f000001/", /private/],
      [`https://example.com/${"a".repeat(MAX_WEBHOOK_URL_LENGTH)}`, /longer/],
    ];
    for (const [url, problem] of refused) expect(webhookUrlProblem(url, false), url).toMatch(problem);
    expect(webhookUrlProblem("http://127.0.0.1:9/", true)).toBeUndefined();
    expect(webhookUrlProblem("ftp://127.0.0.1/", true)).toMatch(/http or https/);
  });

  it("refuses a name that resolves to a private address at connection time", async () => {
    const error = await new Promise<NodeJS.ErrnoException | null>((resolve) =>
      publicLookup("localhost", {}, (failure) => resolve(failure)),
    );
    expect(error?.code).toBe("EPRIVATE");
    expect(error?.message).toMatch(/localhost resolves to .*private or loopback/);
  });
});
