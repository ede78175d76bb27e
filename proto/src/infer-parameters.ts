// The gRPC `InferParameter` oneof and the plain values requests and responses carry.

import type { InferParameter } from "./gen/inference/grpc_service_pb.js";

/** An `InferParameter`'s value as plain JavaScript: bool, int64/uint64 (bigint), string, double. */
export type InferParameterValue = string | number | bigint | boolean;

/**
 * An `InferParameter` holding `value`: booleans as `bool_param`, strings as `string_param`,
 * bigints and integral numbers as `int64_param` (`uint64_param` when `unsigned`), other numbers
 * as `double_param`.
 *
 * @example
 * toInferParameter(3).parameterChoice // { case: "int64Param", value: 3n }
 * toInferParameter(3, true).parameterChoice // { case: "uint64Param", value: 3n }
 */
export function toInferParameter(value: InferParameterValue, unsigned = false): InferParameter {
  const integer = unsigned ? ("uint64Param" as const) : ("int64Param" as const);
  switch (typeof value) {
    case "boolean":
      return parameter({ case: "boolParam", value });
    case "string":
      return parameter({ case: "stringParam", value });
    case "bigint":
      return parameter({ case: integer, value });
    default:
      return Number.isInteger(value)
        ? parameter({ case: integer, value: BigInt(value) })
        : parameter({ case: "doubleParam", value });
  }
}

/**
 * The message `create(InferParameterSchema, { parameterChoice })` gives, without its reflection
 * (a stream's every response carries one).
 */
function parameter(parameterChoice: InferParameter["parameterChoice"]): InferParameter {
  return { $typeName: "inference.InferParameter", parameterChoice };
}

/**
 * The plain value of an `InferParameter`, or undefined when its oneof is unset.
 *
 * @example
 * fromInferParameter(toInferParameter("x")) // "x"
 */
export function fromInferParameter(parameter: InferParameter): InferParameterValue | undefined {
  return parameter.parameterChoice.value;
}

/**
 * A parameter map as `InferParameter`s; the keys in `unsignedKeys` get `uint64_param` for
 * integers (Triton's clients send `priority` so).
 */
export function toInferParameters(
  values: Readonly<Record<string, InferParameterValue>>,
  unsignedKeys: readonly string[] = [],
): Record<string, InferParameter> {
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => [key, toInferParameter(value, unsignedKeys.includes(key))]),
  );
}

/** An `InferParameter` map as plain values, leaving out parameters whose oneof is unset. */
export function fromInferParameters(map: {
  readonly [key: string]: InferParameter;
}): Record<string, InferParameterValue> {
  const entries: [string, InferParameterValue][] = [];
  for (const [key, parameter] of Object.entries(map)) {
    const value = fromInferParameter(parameter);
    if (value !== undefined) entries.push([key, value]);
  }
  return Object.fromEntries(entries);
}
