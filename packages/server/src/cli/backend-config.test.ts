import { describe, expect, it } from "vitest";
import { parseBackendConfig } from "./backend-config.js";

describe("parseBackendConfig", () => {
  it("applies Galley's settings, the global default-max-batch-size included", () => {
    expect(
      parseBackendConfig([
        "onnxruntime,default-max-batch-size=16",
        "python,python-executable=/opt/env/bin/python3",
        "js,default-isolation=shared",
      ]),
    ).toEqual({
      onnxDefaultMaxBatchSize: 16,
      pythonExecutable: "/opt/env/bin/python3",
      jsDefaultIsolation: "shared",
      warnings: [],
    });
    expect(parseBackendConfig(["default-max-batch-size=8"]).onnxDefaultMaxBatchSize).toBe(8);
  });

  it("accepts Triton's Python backend settings, checked as that backend checks them, and says they are unused", () => {
    const settings = [
      "python,shm-default-byte-size=16777216",
      "python,shm-growth-byte-size=1048576",
      "python,stub-timeout-seconds=120",
      "python,shm-message-queue-size=2000",
      "python,shm_message_queue_size=2000",
      "python,thread-pool-size=4",
      "python,shm-region-prefix-name=prefix0_",
    ];
    const config = parseBackendConfig(settings);
    expect(config.warnings).toEqual(
      settings.map(
        (s) => `--backend-config ${s}: accepted, but Galley's Python backend does not use it (it has no such setting)`,
      ),
    );
    expect(config.pythonExecutable).toBeUndefined();
  });

  it("accepts other backends' settings as tritonserver does, with a warning", () => {
    expect(parseBackendConfig(["onnxruntime,enable-global-threadpool=1", "tensorflow,version=2"]).warnings).toEqual([
      "--backend-config onnxruntime,enable-global-threadpool=1: accepted, but Galley does not use it (the onnxruntime backend here has no such setting)",
      "--backend-config tensorflow,version=2: accepted, but Galley does not use it (the tensorflow backend here has no such setting)",
    ]);
  });

  it.each([
    ["python", "--backend-config option format is '<backend name>,<setting>=<value>'. Got python"],
    [
      "python,stub-timeout-seconds",
      "--backend-config option format is '<backend name>,<setting>=<value>'. Got python,stub-timeout-seconds",
    ],
    [
      "python,shm-region-prefix-name=",
      "--backend-config option format is '<backend name>,<setting>=<value>'. Got python,shm-region-prefix-name=",
    ],
    [
      ",x=1",
      "No backend specified. --backend-config option format is <backend name>,<setting>=<value> or <setting>=<value>. Got ,x=1",
    ],
    // tritonserver's split: the backend is what precedes the first comma, even past an '='.
    ["a=b,c", "--backend-config option format is '<backend name>,<setting>=<value>'. Got a=b,c"],
  ])("refuses %s as tritonserver's parser does", (setting, message) => {
    expect(() => parseBackendConfig([setting])).toThrow(message);
  });

  it.each([
    ["python,stub-timeout-seconds=0", "stub-timeout-seconds can't be smaller than or equal to zero."],
    ["python,shm-default-byte-size=1024", "shm-default-byte-size can't be smaller than 1 MiB"],
    ["python,shm-growth-byte-size=x", "shm-growth-byte-size must be an integer"],
    ["python,shm-message-queue-size=lots", "shm-message-queue-size must be an integer"],
    ["python,thread-pool-size=0", "thread-pool-size can't be less than 1."],
    ["onnxruntime,default-max-batch-size=many", "default-max-batch-size must be a number"],
    ["js,default-isolation=process", "default-isolation must be thread or shared"],
  ])("refuses %s", (setting, message) => {
    expect(() => parseBackendConfig([setting])).toThrow(`--backend-config '${setting}': ${message}`);
  });
});
