import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ERRORS_REFERENCE, renderErrorsReference } from "../scripts/errors-reference.js";
import { ERRORS, type ErrorId, InferenceError } from "../src/base/errors.js";
import { HTTP_STATUS, httpStatus } from "../src/frontend/http/http-status.js";

describe("the error table", () => {
  it("is documented in docs/reference/errors.md, id by id (npm run errors:reference rewrites it)", () => {
    expect(readFileSync(ERRORS_REFERENCE, "utf8")).toBe(renderErrorsReference());
  });

  it("maps Triton's codes to Triton's HTTP statuses", () => {
    expect(HTTP_STATUS).toEqual({
      INTERNAL: 500,
      NOT_FOUND: 404,
      UNAVAILABLE: 503,
      UNSUPPORTED: 501,
      UNKNOWN: 400,
      INVALID_ARG: 400,
      ALREADY_EXISTS: 400,
      CANCELLED: 400,
    });
  });

  it("fills templates and keeps the texts Triton's clients check", () => {
    expect(new InferenceError("MODEL_NOT_FOUND", { model: "x" }).message).toBe(
      "Request for unknown model: 'x' is not found",
    );
    expect(new InferenceError("CONTENTS_WITH_RAW", { input: "INPUT0", model: "simple" }).message).toBe(
      "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    );
    expect(httpStatus(new InferenceError("RESTRICTED_HTTP", { header: "k" }))).toBe(403);
  });

  it("has unique messages per id, so a message identifies its error", () => {
    const templates = (Object.keys(ERRORS) as ErrorId[]).map((id) => ERRORS[id][1]).filter((t) => !/^\{\w+\}$/.test(t));
    expect(new Set(templates).size).toBe(templates.length);
  });
});
