// Renders docs/reference/errors.md from the error table in src/base/errors.ts.
// Rewrite the page with `npm run errors:reference -w @galley/server`; test/errors-reference.test.ts
// fails when the page and the table disagree.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Code } from "@connectrpc/connect";
import { ECHO_LIMIT, ERRORS, type ErrorId, InferenceError, TEXT_ECHO_LIMIT } from "../src/base/errors.js";
import { grpcCode } from "../src/frontend/grpc/grpc-status.js";
import { httpStatus } from "../src/frontend/http/http-status.js";

export const ERRORS_REFERENCE = fileURLToPath(new URL("../../../docs/reference/errors.md", import.meta.url));

const grpcName = (code: Code) =>
  Code[code]
    .replace(/([a-z])([A-Z])/g, "$1_$2")
    .toUpperCase()
    .replace("CANCELED", "CANCELLED");

export function renderErrorsReference(): string {
  const rows = (Object.keys(ERRORS) as ErrorId[]).map((id) => {
    const error = new InferenceError(id);
    const message = ERRORS[id][1].replaceAll("|", "\\|");
    return `| \`${id}\` | ${error.code} | ${httpStatus(error)} | ${grpcName(grpcCode(error))} | ${message} |`;
  });
  return `# Error reference

Every error Galley answers with comes from one table (\`packages/server/src/base/errors.ts\`): a
stable id, Triton's error code, the HTTP status and gRPC code that code maps to (Triton's
\`HttpCodeFromError\` and gRPC mapping, PROTOCOL.md §1.1 and §2.3; each frontend maps in one
function, \`frontend/http/http-status.ts\` and \`frontend/grpc/grpc-status.ts\`), and the message. Messages are
Triton's texts wherever Triton has one, because Triton's clients and tests match on them;
\`{name}\` marks a value filled in per request. REST replies carry \`{"error":"<message>"}\`; gRPC
replies carry the message as the status details.

A value longer than ${ECHO_LIMIT} characters is cut there and marked \`...[<its length> characters]\`
(${TEXT_ECHO_LIMIT} for \`{message}\`, \`{detail}\`, \`{reason}\`, \`{note}\`, \`{given}\` and \`{missing}\`, which hold
texts and lists of names): clients choose names, and a 100 KB one echoed whole does not fit a gRPC
status in the trailers.

This page is generated from the table (\`npm run errors:reference -w @galley/server\`) and a test
fails when the two disagree.

| Id | Triton code | HTTP | gRPC | Message |
| --- | --- | --- | --- | --- |
${rows.join("\n")}
`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(ERRORS_REFERENCE, renderErrorsReference());
  console.log(`wrote ${ERRORS_REFERENCE}`);
}
