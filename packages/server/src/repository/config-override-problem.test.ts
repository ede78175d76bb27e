import { fromModelConfigJson } from "@galley/config";
import { describe, expect, it } from "vitest";
import { configOverrideProblem } from "./config-override-problem.js";

function problem(json: string): string {
  try {
    fromModelConfigJson(json);
  } catch (error) {
    return configOverrideProblem(json, error);
  }
  throw new Error("expected the override to be refused");
}

describe("configOverrideProblem", () => {
  it("says an override is not JSON without the engine's parse message", () => {
    expect(problem("not json")).toBe("the 'config' parameter is not valid JSON");
    expect(problem('{"name": "m",')).toBe("the 'config' parameter is not valid JSON");
  });

  it("passes on what the config reader says about a value it cannot read", () => {
    expect(problem("[1, 2]")).toBe("the model configuration JSON must be an object");
    expect(problem('{"max_batch_size": "eight"}')).toMatch(/max_batch_size/);
  });
});
