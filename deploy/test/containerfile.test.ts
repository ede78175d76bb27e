import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseServeArgs } from "../../packages/server/dist/cli/serve-options.js";
import { deployDir, repoRoot } from "./deploy-files.js";

/** Containerfile instructions, continuation lines joined, comments dropped. */
function instructions(text: string): { name: string; args: string }[] {
  return text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith("#"))
    .map((line) => {
      const [name = "", ...rest] = line.split(/\s+/);
      return { name: name.toUpperCase(), args: rest.join(" ") };
    });
}

describe("Containerfile", () => {
  const steps = instructions(readFileSync(join(deployDir, "container/Containerfile"), "utf8"));
  const one = (name: string) => {
    const found = steps.filter((s) => s.name === name);
    expect(found, name).toHaveLength(1);
    return (found[0] as { args: string }).args;
  };

  it("builds FROM an ARG BASE that defaults to a public Node 26 image", () => {
    expect(steps[0]).toEqual({ name: "ARG", args: expect.stringMatching(/^BASE=\S*node:26\S*$/) });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Containerfile syntax, not a template
    expect(one("FROM")).toBe("${BASE}");
  });

  it("exposes HTTP, gRPC and metrics and checks /v2/health/ready", () => {
    expect(one("EXPOSE")).toBe("8000 8001 8002");
    expect(one("HEALTHCHECK")).toMatch(/CMD \[.*http:\/\/127\.0\.0\.1:8000\/v2\/health\/ready/);
  });

  it("runs as a non-root user", () => {
    expect(one("USER")).toMatch(/^[1-9][0-9]*(:[0-9]+)?$/);
  });

  it("runs node as PID 1 (exec form) with galley serve on /models", () => {
    const entrypoint = JSON.parse(one("ENTRYPOINT")) as string[];
    const cmd = JSON.parse(one("CMD")) as string[];
    expect(entrypoint).toEqual(["node", "--max-semi-space-size=8", "/opt/galley/packages/server/dist/cli/galley.js"]);
    expect(cmd[0]).toBe("serve");
    const options = parseServeArgs(cmd.slice(1));
    expect(options !== "help" && options.server.modelRepositories).toEqual(["/models"]);
    expect(one("STOPSIGNAL")).toBe("SIGTERM");
  });

  it("is built and run end to end by CI", () => {
    expect(readFileSync(join(repoRoot, ".ci/run"), "utf8")).toMatch(/deploy\/container\/ci-container-test\.sh/);
  });
});
