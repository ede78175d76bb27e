#!/usr/bin/env node
import { serve } from "./serve.js";

const USAGE = `Usage: galley <command> [options]

Commands:
  serve    run the inference server (galley serve --help)
`;

const [command, ...rest] = process.argv.slice(2);
const commands: Record<string, (args: string[]) => Promise<number>> = { serve };

const run = command ? commands[command] : undefined;
if (!run) {
  if (command && command !== "--help" && command !== "help")
    process.stderr.write(`error: unknown command '${command}'\n\n`);
  process.stderr.write(USAGE);
  process.exitCode = command === "--help" || command === "help" ? 0 : 1;
} else {
  process.exitCode = await run(rest);
}
