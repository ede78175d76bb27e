import { describe, expect, it } from "vitest";
import {
  tritonBool,
  tritonDouble,
  tritonGeneric,
  tritonInt,
  tritonInt64,
  tritonIntBool,
  tritonPair,
  tritonUint64,
} from "./triton-values.js";

describe("flag values read as tritonserver's ParseOption reads them", () => {
  it("reads integers as std::stoi / stoll / stoull: a leading number, the rest ignored", () => {
    expect(tritonInt("f", "42")).toBe(42);
    expect(tritonInt("f", "  -7 apples")).toBe(-7);
    expect(tritonInt("f", "1.9")).toBe(1);
    expect(tritonInt("f", "+2147483647")).toBe(2147483647);
    expect(() => tritonInt("f", "2147483648")).toThrow(
      'Bad option: "--f".\nProvided option value is out of bound. Got 2147483648',
    );
    expect(() => tritonInt("f", "x1")).toThrow('Bad option: "--f".\nInvalid option value. Got x1');
    expect(() => tritonInt("f", "")).toThrow("Invalid option value. Got ");
    expect(tritonInt64("f", "9223372036854775807")).toBe(9223372036854775807n);
    expect(() => tritonInt64("f", "9223372036854775808")).toThrow("out of bound");
    expect(tritonUint64("f", "18446744073709551615")).toBe(18446744073709551615n);
    expect(tritonUint64("f", "-1")).toBe(18446744073709551615n);
    expect(tritonUint64("f", "-0")).toBe(0n);
    expect(() => tritonUint64("f", "18446744073709551616")).toThrow("out of bound");
  });

  it("reads doubles as std::stod", () => {
    expect(tritonDouble("f", "7.5")).toBe(7.5);
    expect(tritonDouble("f", " .5e1x")).toBe(5);
    expect(tritonDouble("f", "0x10")).toBe(16);
    expect(tritonDouble("f", "-INF")).toBe(Number.NEGATIVE_INFINITY);
    expect(tritonDouble("f", "nan")).toBeNaN();
    expect(() => tritonDouble("f", "1e400")).toThrow("out of bound");
    expect(() => tritonDouble("f", "1e-400")).toThrow("out of bound");
    expect(tritonDouble("f", "0e-400")).toBe(0);
    expect(() => tritonDouble("f", "e5")).toThrow("Invalid option value. Got e5");
  });

  it("reads booleans and --log-verbose's int-or-bool", () => {
    expect(tritonBool("f", "ON")).toBe(true);
    expect(tritonBool("f", "0")).toBe(false);
    expect(() => tritonBool("f", "yes")).toThrow("invalid value for bool option: yes");
    expect(tritonIntBool("f", "True")).toBe(1);
    expect(tritonIntBool("f", "false")).toBe(0);
    expect(tritonIntBool("f", "3")).toBe(3);
  });

  it("splits pairs and <name>,<setting>=<value> options as tritonserver does", () => {
    expect(tritonPair("f", "0:1:2", ":", tritonInt, tritonInt)).toEqual([0, 1]);
    expect(() => tritonPair("f", "01", ":", tritonInt, tritonInt)).toThrow(
      "Cannot parse pair option due to incorrect number of inputs.--<pair option> argument requires format <first>:<second>. Found: 01",
    );
    expect(tritonGeneric("host-policy", "p,numa-node=1,2", ",", "=", "policy name")).toEqual(["p", "numa-node", "1,2"]);
    expect(() => tritonGeneric("host-policy", ",numa-node=1", ",", "=", "policy name")).toThrow(
      "--host-policy option format is '<policy name>,<setting>=<value>'. Got ,numa-node=1",
    );
  });
});
