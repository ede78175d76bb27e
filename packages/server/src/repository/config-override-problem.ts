import { ConfigJsonError } from "@galley/config";

/**
 * What is wrong with a load request's `config` override, in words for the client and the log:
 * that it is not JSON, or @galley/config's account of the value it cannot read (which names the
 * field). Never the JavaScript engine's text (`Unexpected token 'o', "not json" is not valid JSON`).
 * `error` is what `fromModelConfigJson(json)` threw.
 */
export function configOverrideProblem(json: string, error: unknown): string {
  try {
    JSON.parse(json);
  } catch {
    return "the 'config' parameter is not valid JSON";
  }
  return error instanceof ConfigJsonError ? error.message : "the 'config' parameter is not a valid model configuration";
}
