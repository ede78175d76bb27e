/** Where an `s3://` model repository is, as Triton reads its path. */
export interface S3Location {
  bucket: string;
  /** The objects' key prefix: empty, or ending with `/`. */
  prefix: string;
  /** `http://host:port` or `https://host:port` for an S3-compatible server; absent for AWS. */
  endpoint?: string;
}

/** Triton's pattern for a path with its own endpoint: `s3://[http(s)://]host:port/bucket[/path]`. */
const WITH_ENDPOINT =
  /^s3:\/\/(http:\/\/|https:\/\/|)([0-9a-zA-Z\-.]+):([0-9]+)\/([0-9a-z.-]+)((\/[0-9a-zA-Z.\-_]+)*)$/;

/** True for a `--model-repository` that names object storage rather than a folder. */
export function isS3Location(location: string): boolean {
  return location.startsWith("s3://");
}

/**
 * Read an `s3://` repository path as Triton does (`S3FileSystem::ParsePath`): extra slashes are
 * dropped; `s3://bucket/path` is AWS; `s3://host:port/bucket/path` (plain HTTP) or
 * `s3://https://host:port/bucket/path` names an S3-compatible endpoint, always addressed
 * path-style. A path that names an endpoint but does not fit the pattern is refused here rather
 * than read as a bucket called `host:port`.
 *
 * @throws Error with Triton's texts for a path with no bucket.
 */
export function parseS3Location(location: string): S3Location {
  let rest = location.slice("s3://".length);
  let scheme = "";
  for (const s of ["https://", "http://"]) {
    if (rest.startsWith(s)) {
      scheme = s;
      rest = rest.slice(s.length);
      break;
    }
  }
  const trimmed = rest.replace(/^\/+|\/+$/g, "");
  if (trimmed === "") throw new Error(`Invalid bucket name: '${rest}'`);
  const clean = `s3://${scheme}${trimmed.replace(/\/{2,}/g, "/")}`;
  const match = WITH_ENDPOINT.exec(clean);
  if (match) {
    const [, protocol, host, port, bucket, object] = match as unknown as string[];
    return {
      bucket: bucket as string,
      prefix: prefixOf((object as string).replace(/^\//, "")),
      endpoint: `${protocol === "https://" ? "https" : "http"}://${host}:${port}`,
    };
  }
  const path = clean.slice("s3://".length + scheme.length);
  const [bucket = "", ...object] = path.split("/");
  if (scheme !== "" || bucket.includes(":")) {
    throw new Error(
      `Invalid S3 path '${location}': an endpoint is written s3://[http://|https://]host:port/bucket[/path], ` +
        "with a lower-case bucket and path segments of letters, digits, '.', '-' and '_'",
    );
  }
  if (!/^[0-9A-Za-z.\-_]+$/.test(bucket)) throw new Error(`No bucket name found in path: ${location}`);
  return { bucket, prefix: prefixOf(object.join("/")) };
}

function prefixOf(object: string): string {
  return object === "" ? "" : `${object}/`;
}
