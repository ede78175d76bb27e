// Triton's own model-configuration test cases (test/corpus/config-validation, see its README):
// every case must get Triton's verdict, and the first problem reported must match Triton's
// message pattern for at least 90% of the failing cases. Misses are printed.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { equals } from "@bufbuild/protobuf";
import { ModelConfigSchema } from "@galley/proto";
import { afterAll, describe, expect, it } from "vitest";
import { runConfigCommand } from "../src/cli/config-command.js";
import { checkRepository, type ModelSource } from "../src/model-check.js";
import { parseModelConfig } from "../src/text-format.js";

const root = fileURLToPath(new URL("./corpus/config-validation/", import.meta.url));
const cases = readdirSync(root).sort();

interface Case {
  folder: string;
  group: string;
  name: string;
  shouldLoad: boolean;
  autoComplete: boolean;
}

function describeCase(folder: string): Case {
  const [group = "", name = ""] = folder.split("--");
  return {
    folder,
    group,
    name,
    shouldLoad: group === "autofill_noplatform_success-ensemble",
    autoComplete: group !== "noautofill_platform",
  };
}

/** Each model of a case, as a repository folder holding version 1. */
function sources(c: Case): ModelSource[] {
  const dir = join(root, c.folder);
  const read = (name: string, file: string): ModelSource => {
    let configText = readFileSync(file, "utf8");
    if (c.group === "noautofill_platform") {
      // The suite adds the platform under test to every case.
      configText = configText.replace(/^\s*platform\s*:.*$/m, "");
      configText = `platform: "onnxruntime_onnx"\n${configText}`;
    }
    return { name, path: name, configText, versions: [1], firstVersionEntries: [] };
  };
  if (existsSync(join(dir, "config.pbtxt"))) return [read(c.name, join(dir, "config.pbtxt"))];
  return readdirSync(dir)
    .filter((entry) => statSync(join(dir, entry)).isDirectory())
    .map((entry) => read(entry, join(dir, entry, "config.pbtxt")));
}

/** The `expected*` files of a case: basic regular expressions (grep), one per line. */
function patterns(c: Case): RegExp[] {
  const dir = join(root, c.folder);
  return readdirSync(dir)
    .filter((f) => f.startsWith("expected"))
    .flatMap((f) => readFileSync(join(dir, f), "utf8").split("\n"))
    .map((line) => line.trim())
    .filter((line) => line !== "")
    .map(basicRegExp);
}

/** grep's basic regular expressions: + ? ( ) { } | are literal; \( \) \{ \} \| are operators. */
function basicRegExp(bre: string): RegExp {
  let out = "";
  for (let i = 0; i < bre.length; i++) {
    const ch = bre[i] ?? "";
    if (ch === "\\" && i + 1 < bre.length) {
      const next = bre[++i] ?? "";
      out += "(){}|".includes(next) ? next : `\\${next}`;
    } else out += "+?(){}|".includes(ch) ? `\\${ch}` : ch;
  }
  return new RegExp(out);
}

const verdicts: string[] = [];
const misses: string[] = [];
let failing = 0;
let matched = 0;

describe("Triton's config-validation cases", () => {
  it("has the whole corpus", () => {
    expect(cases.length).toBe(64);
  });

  it.each(cases.map(describeCase))("$folder", async (c) => {
    // Triton's suite runs on a machine with GPU 0; without it, KIND_AUTO groups become CPU groups.
    const checks = await checkRepository(sources(c), { autoComplete: c.autoComplete, gpus: [0] });
    const subject = checks.get(c.name);
    expect(subject, `model ${c.name} was not checked`).toBeDefined();
    if (!subject) return;
    const loaded = subject.diagnostics.length === 0;
    if (loaded !== c.shouldLoad)
      verdicts.push(
        `${c.folder}: expected ${c.shouldLoad ? "load" : "fail"}, got ${loaded ? "load" : subject.diagnostics[0]?.message}`,
      );
    expect(loaded, subject.diagnostics[0]?.message).toBe(c.shouldLoad);
    if (c.shouldLoad) {
      const expectedFile = join(root, c.folder, c.name, "expected");
      const expected = parseModelConfig(readFileSync(expectedFile, "utf8"));
      expect(
        subject.config && equals(ModelConfigSchema, subject.config, expected),
        "normalised config equals expected",
      ).toBe(true);
      return;
    }
    failing++;
    const message = subject.diagnostics[0]?.message ?? "";
    if (patterns(c).some((p) => p.test(message))) matched++;
    else
      misses.push(
        `${c.folder}:\n      got:      ${message}\n      expected: ${patterns(c).map(String).join("\n                ")}`,
      );
  });

  afterAll(() => {
    console.log(
      `config-validation: ${cases.length - verdicts.length}/${cases.length} verdicts right; ` +
        `${matched}/${failing} failure messages match Triton's pattern (${((100 * matched) / Math.max(failing, 1)).toFixed(1)}%)`,
    );
    if (misses.length > 0) console.log(`message misses:\n  ${misses.join("\n  ")}`);
  });

  it("matches Triton's message for at least 90% of failing cases", () => {
    expect(failing).toBe(cases.filter((c) => !describeCase(c).shouldLoad).length);
    expect(matched / failing).toBeGreaterThanOrEqual(0.9);
  });
});

describe("galley config validate on Triton's cases (as its suite lays them out: version folder 1, GPU 0)", () => {
  it.each(cases.map(describeCase))("$folder", async (c) => {
    const repo = mkdtempSync(join(tmpdir(), "galley-case-"));
    for (const source of sources(c)) {
      mkdirSync(join(repo, source.name, "1"), { recursive: true });
      writeFileSync(join(repo, source.name, "config.pbtxt"), source.configText ?? "");
    }
    let stdout = "";
    const args = ["validate", join(repo, c.name), "--any-backend", "--gpus", "0"];
    if (!c.autoComplete) args.push("--disable-auto-complete-config");
    const code = await runConfigCommand(args, { stdout: (t) => (stdout += t), stderr: () => {}, cwd: repo });
    expect(code, stdout).toBe(c.shouldLoad ? 0 : 1);
    const row = stdout.split("\n").find((line) => line.startsWith(`| ${c.name} `)) ?? "";
    if (c.shouldLoad) expect(row).toMatch(/\| READY +\|$/);
    else expect(row).toContain("UNAVAILABLE: ");
  });
});
