#!/usr/bin/env node
import { runConfigCommand } from "@galley/config";
import { serve } from "./serve.js";

const USAGE = `Usage: galley <command> [options]

Commands:
  serve    run the inference server (galley serve --help)
  config   validate, print, build and scaffold model configurations (galley config --help)
`;

const commands: Record<string, (args: string[]) => Promise<number>> = {
  serve,
  config: (args) => runConfigCommand(args),
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
