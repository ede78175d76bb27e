// Which webhook URLs a job may name, and the address check made again when one is called: only
// http(s), and (unless allowed) no loopback, private, link-local or otherwise special address,
// judged on the addresses the name resolves to, which are the ones then connected to.
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";

/** The longest webhook URL accepted. */
export const MAX_WEBHOOK_URL_LENGTH = 2048;

const PRIVATE = new BlockList();
for (const [net, bits] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 3],
] as const) {
  PRIVATE.addSubnet(net, bits, "ipv4");
}
for (const [net, bits] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
  ["64:ff9b::", 96],
] as const) {
  PRIVATE.addSubnet(net, bits, "ipv6");
}

/** Whether an IP address is loopback, private, link-local, multicast or reserved. */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return PRIVATE.check(address, "ipv4");
  if (family !== 6) return true;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return PRIVATE.check(mapped[1] as string, "ipv4");
  return PRIVATE.check(address, "ipv6");
}

/**
 * Why `text` cannot be a webhook URL, or undefined when it can: an absolute http(s) URL without
 * credentials, at most {@link MAX_WEBHOOK_URL_LENGTH} characters, whose host (when it is an IP
 * address) is public unless `allowPrivate`.
 */
export function webhookUrlProblem(text: string, allowPrivate: boolean): string | undefined {
  if (text.length > MAX_WEBHOOK_URL_LENGTH) return `is longer than ${MAX_WEBHOOK_URL_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return "is not an absolute URL";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "must be an http or https URL";
  if (url.username !== "" || url.password !== "") return "must not carry credentials";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (
    !allowPrivate &&
    (isIP(host) !== 0 ? isPrivateAddress(host) : host === "localhost" || host.endsWith(".localhost"))
  ) {
    return "points at a private or loopback address";
  }
  return undefined;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for `http.request` that resolves as Node does and refuses private addresses, so the
 * address checked is the address connected to (no second resolution to rebind).
 */
export function publicLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, []);
    const refused = addresses.find((a) => isPrivateAddress(a.address));
    if (refused) {
      const failure: NodeJS.ErrnoException = new Error(
        `webhook host ${hostname} resolves to ${refused.address}, a private or loopback address`,
      );
      failure.code = "EPRIVATE";
      return callback(failure, []);
    }
    if ((options as { all?: boolean }).all) return callback(null, addresses);
    const first = addresses[0] as LookupAddress;
    callback(null, first.address, first.family);
  });
}
