import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseServeArgs, type ServeOptions } from "../../packages/server/dist/cli/serve-options.js";
import { adapterRules, loadManifests, only, repoRoot } from "./deploy-files.js";
import { createSchemaValidator } from "./schema-validator.js";

const kubernetes = loadManifests("kubernetes");
const kserve = loadManifests("kserve");
const validate = createSchemaValidator();
const exampleModels = readdirSync(join(repoRoot, "examples/model_repository"), { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name);

describe("every manifest matches its schema", () => {
  for (const { file, index, object } of [...kubernetes, ...kserve]) {
    it(`${file}#${index}: ${object.kind} ${object.metadata?.name}`, () => {
      expect(validate(object)).toEqual([]);
      expect(object.metadata?.name).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    });
  }
});

describe("the schema validator", () => {
  const deployment = only(kubernetes, "Deployment");
  it("rejects a misspelt field at any depth", () => {
    const copy = structuredClone(deployment);
    const container = copy.spec.template.spec.containers[0];
    container.readinesProbe = container.readinessProbe;
    expect(validate(copy).join("\n")).toMatch(/must NOT have additional properties.*readinesProbe/);
  });
  it("rejects a wrong type", () => {
    const copy = structuredClone(deployment);
    copy.spec.template.spec.containers[0].ports[0].containerPort = "8000";
    expect(validate(copy).join("\n")).toMatch(/containerPort must be number/);
  });
  it("rejects a misspelt CRD field", () => {
    const copy = structuredClone(only(kubernetes, "PodMonitor"));
    copy.spec.podMetricEndpoints = copy.spec.podMetricsEndpoints;
    expect(validate(copy).join("\n")).toMatch(/podMetricEndpoints/);
  });
  it("rejects a kind it has no schema for", () => {
    expect(validate({ apiVersion: "apps/v1", kind: "StatefulSet", metadata: { name: "x" } })).toEqual([
      expect.stringMatching(/no schema for apps\/v1 StatefulSet/),
    ]);
  });
});

/** `galley serve` options from a container's args, parsed by the server's own parser. */
function serveOptions(args: string[]): ServeOptions {
  expect(args[0]).toBe("serve");
  const options = parseServeArgs(args.slice(1));
  if (options === "help") throw new Error("--help in the args");
  return options;
}

/** The port of an enabled listener (`false` when the flags turn it off). */
function port(endpoint: { port: number } | false | undefined): number | undefined {
  return endpoint ? endpoint.port : undefined;
}

/** CPU cores or bytes from a Kubernetes quantity ("500m", "2", "4Gi", "1G"). */
function quantity(value: string | number): number {
  const match = /^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(String(value));
  if (!match) throw new Error(`not a quantity: ${value}`);
  const scale: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
  };
  return Number(match[1]) * (match[2] ? (scale[match[2]] ?? Number.NaN) : 1);
}

function matches(selector: Record<string, string>, labels: Record<string, string>): boolean {
  return Object.entries(selector).every(([key, value]) => labels[key] === value);
}

describe("Kubernetes: the Deployment", () => {
  const deployment = only(kubernetes, "Deployment");
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];
  const options = serveOptions(container.args);
  const podLabels: Record<string, string> = deployment.spec.template.metadata.labels;
  const portByName = new Map<string, number>(
    container.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]),
  );

  it("selects its own pods", () => {
    expect(matches(deployment.spec.selector.matchLabels, podLabels)).toBe(true);
  });

  it("loads models explicitly, keeps running when one fails, and is strict about readiness", () => {
    expect(options.server.controlMode).toBe("explicit");
    expect(options.server.loadModels?.length).toBeGreaterThan(0);
    for (const model of options.server.loadModels ?? []) expect(exampleModels).toContain(model);
    expect(options.exitOnError).toBe(false);
    expect(options.server.strictReadiness).toBe(true);
    expect(options.server.modelRepositories).toEqual(["/models"]);
  });

  it("names the three ports as the server listens on them", () => {
    expect(Object.fromEntries(portByName)).toEqual({ http: 8000, grpc: 8001, metrics: 8002 });
    const { http, grpc, metrics } = options.server;
    expect([http, grpc, metrics].map(port)).toEqual([8000, 8001, 8002]);
  });

  it("probes readiness on /v2/health/ready, liveness and startup on /v2/health/live", () => {
    expect(container.readinessProbe.httpGet).toEqual({ path: "/v2/health/ready", port: "http" });
    expect(container.livenessProbe.httpGet).toEqual({ path: "/v2/health/live", port: "http" });
    expect(container.startupProbe.httpGet.path).toMatch(/^\/v2\/health\/(live|ready)$/);
    expect(portByName.has(container.startupProbe.httpGet.port)).toBe(true);
    // The startup probe gives model loading minutes, not the liveness probe's seconds.
    const startupSecs = container.startupProbe.periodSeconds * container.startupProbe.failureThreshold;
    expect(startupSecs).toBeGreaterThanOrEqual(120);
  });

  it("gives SIGTERM's drain time to finish before the kubelet kills the pod", () => {
    const preStop = (container.lifecycle.preStop.exec.command as string[]).join(" ");
    const preStopSecs = Number(/setTimeout\(\(\) => \{\}, (\d+)\)/.exec(preStop)?.[1]) / 1000;
    expect(preStopSecs).toBeGreaterThan(0);
    expect(options.server.exitTimeoutSecs).toBe(30);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan((options.server.exitTimeoutSecs ?? 30) + preStopSecs);
  });

  it("mounts /dev/shm as a memory volume and a writable /tmp on a read-only root", () => {
    const volume = (name: string) => pod.volumes.find((v: { name: string }) => v.name === name);
    const mount = (path: string) => container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === path);
    expect(volume(mount("/dev/shm")?.name)?.emptyDir?.medium).toBe("Memory");
    expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(volume(mount("/tmp")?.name)?.emptyDir).toBeDefined();
  });

  it("requests and limits CPU and memory, requests within limits", () => {
    for (const resource of ["cpu", "memory"]) {
      const request = quantity(container.resources.requests[resource]);
      const limit = quantity(container.resources.limits[resource]);
      expect(request).toBeGreaterThan(0);
      expect(request).toBeLessThanOrEqual(limit);
    }
  });

  it("runs as the image's non-root user", () => {
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(pod.securityContext.runAsUser).toBe(1000);
    expect(container.securityContext.allowPrivilegeEscalation).toBe(false);
  });

  it("is reached through a Service with ports http, grpc and metrics", () => {
    const service = only(kubernetes, "Service");
    expect(matches(service.spec.selector, podLabels)).toBe(true);
    const ports = service.spec.ports.map((p: { name: string; port: number; targetPort: string }) => [
      p.name,
      p.port,
      portByName.get(p.targetPort),
    ]);
    expect(ports).toEqual([
      ["http", 8000, 8000],
      ["grpc", 8001, 8001],
      ["metrics", 8002, 8002],
    ]);
  });

  it("is scraped by the PodMonitor on its metrics port", () => {
    const monitor = only(kubernetes, "PodMonitor");
    expect(matches(monitor.spec.selector.matchLabels, podLabels)).toBe(true);
    expect(monitor.spec.podMetricsEndpoints.map((e: { port: string }) => e.port)).toEqual(["metrics"]);
  });

  it("keeps a replica through disruptions", () => {
    const budget = only(kubernetes, "PodDisruptionBudget");
    expect(matches(budget.spec.selector.matchLabels, podLabels)).toBe(true);
    expect(budget.spec.minAvailable).toBeLessThan(deployment.spec.replicas);
  });

  it("is scaled by the HPA on the queue-time metric the adapter serves", () => {
    const hpa = only(kubernetes, "HorizontalPodAutoscaler");
    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: "apps/v1",
      kind: "Deployment",
      name: deployment.metadata.name,
    });
    expect(hpa.spec.minReplicas).toBeLessThanOrEqual(hpa.spec.maxReplicas);
    const adapter = adapterRules(kubernetes);
    const served = adapter.map((rule) => rule.name.as);
    for (const metric of hpa.spec.metrics) expect(served).toContain(metric.pods.metric.name);
  });
});

describe("KServe", () => {
  const runtime = only(kserve, "ClusterServingRuntime");
  const service = only(kserve, "InferenceService");
  const container = runtime.spec.containers[0];

  it("runs galley serve on the ports KServe expects of a v2 runtime", () => {
    expect(container.name).toBe("kserve-container");
    const options = serveOptions(container.args);
    expect(options.server.modelRepositories).toEqual(["/mnt/models"]);
    expect(port(options.server.http)).toBe(8080);
    expect(container.ports.map((p: { containerPort: number }) => p.containerPort)).toEqual([8080]);
    expect(container.readinessProbe.httpGet).toEqual({ path: "/v2/health/ready", port: 8080 });
  });

  it("speaks the v2 protocol and supports onnx and galley model formats", () => {
    expect(runtime.spec.protocolVersions).toEqual(expect.arrayContaining(["v2", "grpc-v2"]));
    expect(runtime.spec.supportedModelFormats.map((f: { name: string }) => f.name).sort()).toEqual(["galley", "onnx"]);
  });

  it("has an InferenceService that uses it", () => {
    const model = service.spec.predictor.model;
    expect(model.runtime).toBe(runtime.metadata.name);
    expect(runtime.spec.supportedModelFormats.map((f: { name: string }) => f.name)).toContain(model.modelFormat.name);
    expect(runtime.spec.protocolVersions).toContain(model.protocolVersion);
  });
});
