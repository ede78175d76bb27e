// The one web type Node's own types leave out that @connectrpc/connect's declarations name.

/**
 * For programs type-checked without the DOM lib and with `skipLibCheck: false`: declares the
 * global `HeadersInit` that `@connectrpc/connect`'s declarations name (`CallOptions.headers`,
 * `ConnectError`'s metadata). `@types/node` binds fetch's `Headers`, `Request` and `Response`
 * globally but not this alias (a type alias cannot merge with the DOM lib's, so it cannot be
 * declared for everyone). Include it with `"types": ["node", "@galley/client/node-globals"]` or
 * `import type {} from "@galley/client/node-globals"`; never together with the DOM lib, which
 * declares it already.
 *
 * @packageDocumentation
 */
export {};

declare global {
  /** What `new Headers(init)` takes: undici's `HeadersInit`, as `@types/node` types it. */
  type HeadersInit = NonNullable<ConstructorParameters<typeof Headers>[0]>;
}
