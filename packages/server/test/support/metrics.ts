// A small reader for the Prometheus text exposition format that /metrics serves.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Scrape {
  text: string;
  samples: Sample[];
  /** `# TYPE` per metric family. */
  types: Map<string, string>;
}

/** Parse Prometheus text (what Triton's /metrics serves). */
export function parseMetrics(text: string): Scrape {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      types.set(type[1] as string, type[2] as string);
      continue;
    }
    if (line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key as string] = value as string;
    }
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return { text, samples, types };
}

/** GET `<metricsUrl><path>` and parse it; throws unless the answer is 200 text/plain. */
export async function scrape(metricsUrl: string | undefined, path = "/metrics"): Promise<Scrape> {
  if (!metricsUrl) throw new Error("the metrics endpoint is not enabled");
  const response = await fetch(`${metricsUrl}${path}`);
  if (response.status !== 200) throw new Error(`${path}: HTTP ${response.status}`);
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("text/plain")) throw new Error(`${path}: content-type ${type}`);
  return parseMetrics(await response.text());
}

/** The samples of `name` whose labels include `labels`. */
export function findSamples(s: Scrape, name: string, labels: Record<string, string> = {}): Sample[] {
  return s.samples.filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
}

/** The value of the one sample of `name` with `labels`; throws unless there is exactly one. */
export function sampleValue(s: Scrape, name: string, labels: Record<string, string> = {}): number {
  const found = findSamples(s, name, labels);
  if (found.length !== 1) {
    throw new Error(`expected one ${name} ${JSON.stringify(labels)}, found ${found.length}:\n${s.text}`);
  }
  return (found[0] as Sample).value;
}
