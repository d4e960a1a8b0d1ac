// sluice tokenize: text -> token ids with the model's own tokenizer.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace sluice::cli {

namespace {

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

void add_tokenize_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Encode text as the reference encode(text, add_special_tokens=False) does; prints the ids as a JSON array");
  struct Opts {
    std::string model, text, jsonl, decode;
    bool has_text = false, ordinary = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model,
                  "Model directory with tokenizer.json, or tiktoken.model + tokenizer_config.json (default: "
                  "$SLUICE_MODEL or the shipped sluice-k3-mini)");
  auto* t = cmd->add_option("--text", o->text, "Text to encode");
  auto* j = cmd->add_option("--jsonl", o->jsonl, "File with one JSON string per line; prints one array per line");
  auto* d = cmd->add_option("--decode", o->decode, "Comma-separated ids to decode; prints the text as a JSON string");
  t->excludes(j)->excludes(d);
  j->excludes(d);
  cmd->add_flag("--ordinary", o->ordinary, "Do not recognise special/added tokens written in the text");
  cmd->callback([o, t, j, d, &action] {
    action = [o, t, j, d] {
      if (!*t && !*j && !*d) fail("tokenize: give one of --text, --jsonl or --decode");
      auto tok = text::Tokenizer::load(model_or_default(o->model, /*weights=*/false));
      auto enc = [&](const std::string& s) { return o->ordinary ? tok->encode_ordinary(s) : tok->encode(s); };
      if (*t) {
        std::printf("%s\n", ids_json(enc(o->text)).c_str());
      } else if (*d) {
        auto ids = parse_token_list(o->decode);
        for (int32_t id : ids)
          if (!tok->valid_id(id)) fail("--decode: id {} is not in the vocabulary (size {})", id, tok->vocab_size());
        std::printf("%s\n", nlohmann::json(tok->decode(ids)).dump().c_str());
      } else {
        std::ifstream in(o->jsonl, std::ios::binary);
        if (!in) fail("{}: cannot open", o->jsonl);
        std::string line;
        size_t n = 0;
        while (std::getline(in, line)) {
          ++n;
          if (!line.empty() && line.back() == '\r') line.pop_back();
          nlohmann::json v;
          try {
            v = nlohmann::json::parse(line);
          } catch (const nlohmann::json::exception& e) {
            fail("{}: line {}: not valid JSON: {}", o->jsonl, n, e.what());
          }
          if (!v.is_string()) fail("{}: line {}: expected a JSON string", o->jsonl, n);
          std::string out = ids_json(enc(v.get<std::string>()));
          out += '\n';
          std::fwrite(out.data(), 1, out.size(), stdout);
        }
      }
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(20, add_tokenize_command);

}  // namespace sluice::cli
