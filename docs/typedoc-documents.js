// A typedoc plugin for the Markdown pages that typedoc.json's projectDocuments lists: each page is
// titled by its first heading ("Serving models", not "docs/guides/serving") and sits in the
// sidebar group of its folder (Guides, Reference, Examples, Benchmarks, Project). Headings get
// the anchors GitHub gives them (typedoc leaves code spans out: "## `latency.ts`" would be "#_"),
// so one link works on GitHub and in the site. The page's
// address stays the file's path (documents/docs_guides_serving.html): the title is set after
// typedoc has chosen the addresses. Once the site is written, any link to a raw Markdown copy
// (media/*.md: a Markdown file that is not a page of the site) is an error.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { Application, Converter, Renderer } from "typedoc";

const root = fileURLToPath(new URL("..", import.meta.url));

/** @type {[string, string][]} path prefix (from the repository root) → sidebar group */
const groups = [
  ["docs/guides/", "Guides"],
  ["docs/reference/", "Reference"],
  ["examples/", "Examples"],
  ["bench/", "Benchmarks"],
  ["", "Project"],
];

/** @param {import("typedoc").Application} app */
export function load(app) {
  app.on(Application.EVENT_BOOTSTRAP_END, () => headingAnchorsAsGitHub(app));
  /** @type {Map<import("typedoc").DocumentReflection, string>} */
  const titles = new Map();
  app.converter.on(Converter.EVENT_CREATE_DOCUMENT, (_context, document) => {
    const text = document.content.map((part) => part.text).join("");
    const heading = /^# (.+)$/m.exec(text);
    if (heading) titles.set(document, heading[1].replaceAll("`", "").trim());
    const file = document.project.files.getReflectionPath(document);
    if (file !== undefined && !("group" in document.frontmatter)) {
      const path = relative(root, file).split(sep).join("/");
      document.frontmatter.group = groups.find(([prefix]) => path.startsWith(prefix))?.[1];
    }
  });
  app.renderer.on(Renderer.EVENT_BEGIN, () => {
    for (const [document, title] of titles) document.name = title;
  });
  app.renderer.on(Renderer.EVENT_END, (event) => {
    const sources = event.project.files.getNameToAbsoluteMap();
    for (const [page, link] of rawMarkdownLinks(event.outputDirectory)) {
      const source = sources.get(link.replace(/^(\.\.\/)*media\//, ""));
      const file = source === undefined ? link : relative(root, source);
      app.logger.error(`${page} links to ${file} as raw Markdown (${link}): add it to typedoc.json's projectDocuments`);
    }
  });
}

/**
 * Headings' anchors as GitHub makes them: typedoc's slug is made of a heading's text tokens, so a
 * code span in a heading gets a text token of its own (read for the slug, never rendered).
 * @param {import("typedoc").Application} app
 */
function headingAnchorsAsGitHub(app) {
  const loader = app.options.getValue("markdownItLoader");
  app.options.setValue("markdownItLoader", (parser) => {
    parser.core.ruler.push("galley_heading_code", (state) => {
      for (const [i, token] of state.tokens.entries()) {
        if (token.type !== "heading_open") continue;
        for (const child of state.tokens[i + 1].children ?? []) {
          if (child.type === "code_inline")
            child.children = [Object.assign(new state.Token("text", "", 0), { content: child.content })];
        }
      }
    });
    loader(parser);
  });
}

/**
 * Links from the site's pages to Markdown files that typedoc copied as they are (media/*.md).
 * @param {string} site the output directory
 * @returns {[string, string][]} [page, link] pairs
 */
export function rawMarkdownLinks(site) {
  /** @type {[string, string][]} */
  const found = [];
  for (const page of readdirSync(site, { recursive: true, encoding: "utf8" })) {
    if (!page.endsWith(".html")) continue;
    const html = readFileSync(join(site, page), "utf8");
    for (const [, link] of html.matchAll(/href="((?:\.\.\/)*media\/[^"#]+\.md)(?:#[^"]*)?"/g)) {
      found.push([page.split(sep).join("/"), link]);
    }
  }
  return found;
}
