import { runConfigCommand } from "@galley/config";
import { serve } from "./serve.js";
import { traceSummary } from "./trace-summary.js";

const USAGE = `Usage: galley <command> [options]

Commands:
  serve    run the inference server (galley serve --help)
  config   validate, print, build and scaffold model configurations (galley config --help)
  perf     measure a model's throughput and latency under load, as perf_analyzer (galley perf --help)
  trace-summary <file>...   where traced requests' time went, per model (files from --trace-config)
`;

/**
 * `galley perf` lives in @galley/client (which depends on this package for its tests), so it is
 * loaded at run time from a specifier in a variable: no build-time dependency either way.
 */
async function perf(args: string[]): Promise<number> {
  const specifier = "@galley/client/perf";
  let mod: { runPerf(argv: string[]): Promise<number> };
  try {
    mod = (await import(specifier)) as typeof mod;
  } catch (error) {
    const code = (error as { code?: string }).code;
    const missing =
      (code === "ERR_MODULE_NOT_FOUND" || code === "ERR_PACKAGE_PATH_NOT_EXPORTED") &&
      String((error as Error).message).includes("@galley/client");
    if (!missing) throw error;
    process.stderr.write(
      "error: galley perf needs the @galley/client package (version 0.1 or later), which is not installed.\n" +
        "Install it next to @galley/server: npm install @galley/client\n",
    );
    return 1;
  }
  return mod.runPerf(args);
}

const commands: Record<string, (args: string[]) => Promise<number>> = {
  serve,
  // validate asks the server's backends whether their libraries are here.
  config: async (args) =>
    runConfigCommand(args, undefined, (await import("./backend-libraries.js")).backendLibraries()),
  perf,
  "trace-summary": traceSummary,
};

const [command, ...rest] = process.argv.slice(2);
const run = command ? commands[command] : undefined;
if (!run) {
  const help = command === "--help" || command === "help";
  if (command && !help) process.stderr.write(`error: unknown command '${command}'\n\n`);
  (help ? process.stdout : process.stderr).write(USAGE);
  process.exitCode = help ? 0 : 1;
} else {
  process.exitCode = await run(rest);
}
