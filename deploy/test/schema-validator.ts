import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv, type ValidateFunction } from "ajv";
import { deployDir, type KubeObject } from "./deploy-files.js";

/**
 * The schema each apiVersion + kind is checked against: the Kubernetes ones generated from
 * kubernetes-types, the CRD ones written from the upstream CRDs (deploy/schemas/README.md).
 */
export const SCHEMAS: Record<string, string> = {
  "apps/v1 Deployment": "kubernetes-1.30.schema.json#/definitions/Deployment",
  "v1 Service": "kubernetes-1.30.schema.json#/definitions/Service",
  "v1 ConfigMap": "kubernetes-1.30.schema.json#/definitions/ConfigMap",
  "autoscaling/v2 HorizontalPodAutoscaler": "kubernetes-1.30.schema.json#/definitions/HorizontalPodAutoscaler",
  "policy/v1 PodDisruptionBudget": "kubernetes-1.30.schema.json#/definitions/PodDisruptionBudget",
  "monitoring.coreos.com/v1 PodMonitor": "monitoring.coreos.com.schema.json#/definitions/PodMonitor",
  "monitoring.coreos.com/v1 ServiceMonitor": "monitoring.coreos.com.schema.json#/definitions/ServiceMonitor",
  "serving.kserve.io/v1alpha1 ClusterServingRuntime":
    "serving.kserve.io.schema.json#/definitions/ClusterServingRuntime",
  "serving.kserve.io/v1alpha1 ServingRuntime": "serving.kserve.io.schema.json#/definitions/ServingRuntime",
  "serving.kserve.io/v1beta1 InferenceService": "serving.kserve.io.schema.json#/definitions/InferenceService",
};

const FILES = ["kubernetes-1.30.schema.json", "monitoring.coreos.com.schema.json", "serving.kserve.io.schema.json"];

/** Validates Kubernetes objects offline against the committed schemas in deploy/schemas. */
export function createSchemaValidator(): (object: KubeObject) => string[] {
  const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
  for (const file of FILES) ajv.addSchema(JSON.parse(readFileSync(join(deployDir, "schemas", file), "utf8")));
  const compiled = new Map<string, ValidateFunction>();
  for (const [key, ref] of Object.entries(SCHEMAS)) compiled.set(key, ajv.compile({ $ref: ref }));
  return (object) => {
    const key = `${object.apiVersion} ${object.kind}`;
    const validate = compiled.get(key);
    if (!validate) return [`no schema for ${key} (known: ${Object.keys(SCHEMAS).join(", ")})`];
    if (validate(object)) return [];
    return (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  };
}
