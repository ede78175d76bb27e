import { configureTextEncoding } from "@bufbuild/protobuf/wire";

/**
 * protobuf-es decodes strings with a default `TextDecoder`, which drops a leading U+FEFF as if it
 * were a byte-order mark: `name: "\ufeffx"` would read back as `"x"`, in the binary wire and the
 * text format alike. A protobuf string keeps every character, so Galley installs decoders that
 * keep it (`ignoreBOM`). The setting is process-wide (protobuf-es keeps it on `globalThis`) and
 * only changes that one case. Importing `@galley/proto` applies it.
 */
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
const strictDecoder = new TextDecoder("utf-8", { ignoreBOM: true, fatal: true });

configureTextEncoding({
  encodeUtf8: (text) => encoder.encode(text),
  decodeUtf8: (bytes, strict) => (strict ? strictDecoder : decoder).decode(bytes),
  checkUtf8: (text) => {
    try {
      encodeURIComponent(text);
      return true;
    } catch {
      return false;
    }
  },
});
