// Reference chat-template renderings for sluice's template tests.
// usage: node render_ref.mjs TEMPLATE_FILE CONTEXTS.jsonl > OUT.jsonl
//        node render_ref.mjs --cases CASES.jsonl > OUT.jsonl
// Each input line is a JSON object of template variables (or, with --cases,
// {"template": ..., "context": {...}}); each output line is {"ok": rendered}
// or {"error": message}, rendered by @huggingface/jinja.
import fs from "node:fs";
import { Template } from "@huggingface/jinja";

const args = process.argv.slice(2);
const out = [];
const run = (f) => {
  try {
    out.push(JSON.stringify({ ok: f() }));
  } catch (e) {
    out.push(JSON.stringify({ error: String(e.message ?? e) }));
  }
};
if (args[0] === "--cases") {
  for (const line of fs.readFileSync(args[1], "utf8").split("\n")) {
    if (!line) continue;
    const c = JSON.parse(line);
    run(() => new Template(c.template).render(c.context));
  }
} else {
  const tmpl = new Template(fs.readFileSync(args[0], "utf8"));
  for (const line of fs.readFileSync(args[1], "utf8").split("\n")) {
    if (!line) continue;
    run(() => tmpl.render(JSON.parse(line)));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
