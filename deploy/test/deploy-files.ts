import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, parse as parseYaml } from "yaml";

/** The deploy/ folder and the repository root. */
export const deployDir = fileURLToPath(new URL("..", import.meta.url));
export const repoRoot = join(deployDir, "..");

/** A Kubernetes object as read from a manifest; checked against its schema before use. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  // biome-ignore lint/suspicious/noExplicitAny: manifests are checked by schema, then read field by field
  spec?: any;
  data?: Record<string, string>;
}

/** One YAML document of a manifest file, with where it came from for messages. */
export interface Manifest {
  file: string;
  index: number;
  object: KubeObject;
}

/** Every *.yaml file under `dir` (relative to deploy/), recursively, sorted. */
export function yamlFiles(dir: string): string[] {
  const root = join(deployDir, dir);
  return readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((name) => /\.ya?ml$/.test(name))
    .map((name) => join(root, name))
    .sort();
}

/** Every document of every YAML file under `dirs`; a syntax error or warning throws with its place. */
export function loadManifests(...dirs: string[]): Manifest[] {
  const manifests: Manifest[] = [];
  for (const file of dirs.flatMap(yamlFiles)) {
    const name = relative(repoRoot, file);
    parseAllDocuments(readFileSync(file, "utf8")).forEach((document, index) => {
      const problems = [...document.errors, ...document.warnings];
      if (problems.length > 0) throw new Error(`${name} document ${index}: ${problems.map(String).join("; ")}`);
      manifests.push({ file: name, index, object: document.toJS() as KubeObject });
    });
  }
  return manifests;
}

/** A YAML file parsed strictly (duplicate keys and other warnings are errors). */
export function loadYaml(path: string): unknown {
  return parseYaml(readFileSync(join(deployDir, path), "utf8"), { strict: true, prettyErrors: true });
}

/** The one object of `kind` among `manifests` (throws when there is not exactly one). */
export function only(manifests: Manifest[], kind: string): KubeObject {
  const found = manifests.filter((m) => m.object.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, found ${found.length}`);
  return (found[0] as Manifest).object;
}

/** A prometheus-adapter rule (the fields Galley's rule uses). */
export interface AdapterRule {
  seriesQuery: string;
  metricsQuery: string;
  name: { matches: string; as: string };
  resources: { overrides: Record<string, { resource: string }> };
}

/** The rules in the prometheus-adapter ConfigMap among `manifests` (its key config.yaml). */
export function adapterRules(manifests: Manifest[]): AdapterRule[] {
  const config = only(manifests, "ConfigMap");
  return (parseYaml(config.data?.["config.yaml"] ?? "", { strict: true }) as { rules: AdapterRule[] }).rules;
}
