#include "text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/hf_tokenizer.h"
#include "util/error.h"

namespace sluice::text {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
jinja::Template compile(const std::string& source, const std::string& where) {
  try {
    return jinja::Template(source);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}
}  // namespace

ChatTemplate ChatTemplate::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = model_dir + "/tokenizer_config.json", jinja_path = model_dir + "/chat_template.jinja";
  nlohmann::json cfg = nlohmann::json::object();
  if (fs::exists(cfg_path)) {
    try {
      cfg = nlohmann::json::parse(slurp(cfg_path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", cfg_path, e.what());
    }
  }
  std::optional<std::string> bos, eos, pad;
  read_special_names(cfg, bos, eos, pad);
  std::string source, where;
  if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& t = cfg["chat_template"];
    where = cfg_path + ": chat_template";
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          source = e["template"].get<std::string>();
      if (source.empty()) fail("{}: no entry named 'default'", where);
    } else {
      fail("{}: must be a string or a list of {{name, template}}", where);
    }
  } else if (fs::exists(jinja_path)) {
    source = slurp(jinja_path);
    where = jinja_path;
  } else {
    fail("{}: no chat template (tokenizer_config.json has no chat_template and chat_template.jinja is missing)",
         model_dir);
  }
  try {
    return ChatTemplate(source, bos, eos);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

ChatTemplate::ChatTemplate(const std::string& source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token)
    : source_(source), tmpl_(compile(source, "chat template")), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  return tmpl_.render(context(messages, tools, add_generation_prompt, extra));
}

nlohmann::json ChatTemplate::context(const nlohmann::json& messages, const nlohmann::json& tools,
                                     bool add_generation_prompt, const nlohmann::json& extra) const {
  if (!messages.is_array()) fail("chat template: messages must be a list");
  nlohmann::json ctx = nlohmann::json::object();
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  ctx["messages"] = messages;
  if (!tools.is_null()) ctx["tools"] = tools;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (bos_) ctx["bos_token"] = *bos_;
  if (eos_) ctx["eos_token"] = *eos_;
  return ctx;
}

}  // namespace sluice::text
