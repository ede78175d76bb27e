// Node publishes its HTTP parser's callback slots from `_http_common` without type declarations.
declare module "node:_http_common" {
  /** The native parser's constructor; its static `kOn…` numbers index each parser's callback slots. */
  export const HTTPParser: Record<string, unknown>;
}
