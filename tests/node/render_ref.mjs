// Reference chat-template renderings for sluice's template tests.
// usage: node render_ref.mjs TEMPLATE_FILE CONTEXTS.jsonl > OUT.jsonl
// Each input line is a JSON object of template variables; each output line is
// {"ok": rendered} or {"error": message}, rendered by @huggingface/jinja.
import fs from "node:fs";
import { Template } from "@huggingface/jinja";

const [templateFile, inputFile] = process.argv.slice(2);
const tmpl = new Template(fs.readFileSync(templateFile, "utf8"));
const out = [];
for (const line of fs.readFileSync(inputFile, "utf8").split("\n")) {
  if (!line) continue;
  try {
    out.push(JSON.stringify({ ok: tmpl.render(JSON.parse(line)) }));
  } catch (e) {
    out.push(JSON.stringify({ error: String(e.message ?? e) }));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
