import { parser } from "@prometheus-io/lezer-promql";

/**
 * Placeholders that are not PromQL but stand where PromQL goes: Grafana's interval variables and
 * prometheus-adapter's query templates. Replaced by something of the same kind before parsing.
 */
const PLACEHOLDERS: [RegExp, string][] = [
  [/\$__rate_interval|\$__interval|\$__range/g, "1m"],
  [/<<\.LabelMatchers>>/g, 'namespace="default",pod="galley-0"'],
  [/<<\.GroupBy>>/g, "pod"],
  [/<<\.Series>>/g, "nv_inference_count"],
];

/** Parse a PromQL expression with Prometheus's own grammar (lezer-promql). */
export function parsePromql(expression: string): { errors: string[]; metrics: string[] } {
  let text = expression;
  for (const [pattern, value] of PLACEHOLDERS) text = text.replace(pattern, value);
  const errors: string[] = [];
  const metrics = new Set<string>();
  parser.parse(text).iterate({
    enter(node) {
      if (node.type.isError) errors.push(`syntax error at ${node.from}: '${text.slice(node.from, node.to + 10)}'`);
      if (node.name === "Identifier" && node.node.parent?.name === "VectorSelector") {
        metrics.add(text.slice(node.from, node.to));
      }
    },
  });
  return { errors, metrics: [...metrics] };
}
