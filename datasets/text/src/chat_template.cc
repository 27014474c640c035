#include "ax/datasets/text/chat_template.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "hf_pipeline.h"

namespace ax::data {
namespace {

using json = nlohmann::json;
constexpr std::string_view kContent = "{content}";

ChatTemplate simple_template() {
  ChatTemplate t;
  t.system = "{content}\n\n";
  t.user = "User: {content}\n";
  t.assistant = "Assistant: {content}\n";
  return t;
}

// Meta's Llama 3 chat format (its tokenizer_config.json chat_template) without the tokenizer's
// BOS, which the template writes as text: <|begin_of_text|> first, each message (trimmed, as
// the template's `| trim` does) in a header block ended by <|eot_id|>.
ChatTemplate llama3_template() {
  ChatTemplate t;
  t.begin = "<|begin_of_text|>";
  t.system = "<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>";
  t.user = "<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>";
  t.assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n{content}<|eot_id|>";
  t.trim = true;
  return t;
}

// ChatML, the format of Qwen (and others): each message between <|im_start|>ROLE and
// <|im_end|>, on lines of their own; nothing before the first. Qwen2's and Qwen2.5's templates
// add a default system message (match_hf_chat_template reads it from theirs); the built-in adds
// none.
ChatTemplate chatml_template() {
  ChatTemplate t;
  t.system = "<|im_start|>system\n{content}<|im_end|>\n";
  t.user = "<|im_start|>user\n{content}<|im_end|>\n";
  t.assistant = "<|im_start|>assistant\n{content}<|im_end|>\n";
  return t;
}

// Python's str.strip() on the content, as Jinja's `trim` filter does: Unicode white space off
// both ends.
std::string jinja_trimmed(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    size_t next = begin;
    if (!hf::is_white_space(hf::next_char(s, &next))) break;
    begin = next;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!hf::is_white_space(hf::next_char(s, &next))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

bool jinja_has(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// The first literal system message a ChatML Jinja template writes ('<|im_start|>system\nTEXT
// <|im_end|>' with TEXT a plain string, not an expression), or "".
std::string chatml_default_system(const std::string& jinja) {
  for (std::string_view start :
       {std::string_view("<|im_start|>system\\n"), std::string_view("<|im_start|>system\n")}) {
    for (size_t at = jinja.find(start); at != std::string::npos; at = jinja.find(start, at + 1)) {
      const size_t from = at + start.size();
      const size_t end = jinja.find("<|im_end|>", from);
      if (end == std::string::npos) break;
      const std::string text = jinja.substr(from, end - from);
      if (text.empty() || text.find_first_of("'\"{}+\\\n") != std::string::npos) continue;
      return text;
    }
  }
  return "";
}

Status check_role_text(const std::string& role, const std::string& text, const std::string& from) {
  const size_t at = text.find(kContent);
  if (at == std::string::npos || text.find(kContent, at + 1) != std::string::npos) {
    return InvalidArgument("chat template ", from, ": \"", role, "\" must hold \"{content}\" once");
  }
  return Status::Ok();
}

// `path` ("a.b": the key "a.b", else key b of the object at a) in a record.
const json* lookup(const json& record, const std::string& path) {
  if (auto it = record.find(path); it != record.end()) return &*it;
  const json* at = &record;
  for (const std::string& part : str_split(path, '.')) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(part);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

StatusOr<std::vector<ChatMessage>> messages_of(const json& record, const std::string& field) {
  if (!record.is_object()) return InvalidArgument("expected a JSON object");
  const json* list = lookup(record, field);
  if (list == nullptr || !list->is_array()) {
    return InvalidArgument("field '", field, "' is missing or not a list of messages");
  }
  std::vector<ChatMessage> out;
  for (const json& m : *list) {
    auto role = m.is_object() ? m.find("role") : m.end();
    auto content = m.is_object() ? m.find("content") : m.end();
    if (!m.is_object() || role == m.end() || !role->is_string() || content == m.end() ||
        !content->is_string()) {
      return InvalidArgument("message ", out.size(),
                             " is not an object with string fields 'role' and 'content'");
    }
    out.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return out;
}

}  // namespace

std::vector<std::string> ChatTemplate::names() { return {"simple", "llama3", "chatml"}; }

StatusOr<ChatTemplate> ChatTemplate::match_hf_chat_template(const std::string& jinja,
                                                            const std::string& from) {
  // What the template looks like, by the markers each family's template writes.
  std::string refused;
  if (jinja_has(jinja, "<|im_start|>") && jinja_has(jinja, "<|im_end|>")) {
    if (jinja_has(jinja, "<think>") || jinja_has(jinja, "enable_thinking") ||
        jinja_has(jinja, "reasoning_content")) {
      refused = "ChatML with thinking (<think> blocks, as Qwen3's)";
    } else {
      ChatTemplate t = chatml_template();
      t.default_system = chatml_default_system(jinja);
      return t;
    }
  } else if (jinja_has(jinja, "<|start_header_id|>") && jinja_has(jinja, "<|eot_id|>")) {
    if (jinja_has(jinja, "Cutting Knowledge Date") || jinja_has(jinja, "Environment: ipython")) {
      refused = "Llama 3.1 or later's (a dated system block and tool calls in every prompt)";
    } else {
      return llama3_template();
    }
  } else if (jinja_has(jinja, "[INST]")) {
    refused = "Llama 2's or Mistral's [INST] ... [/INST]";
  } else if (jinja_has(jinja, "<start_of_turn>")) {
    refused = "Gemma's <start_of_turn>";
  } else if (jinja_has(jinja, "<|user|>") || jinja_has(jinja, "<|assistant|>")) {
    refused = "the <|user|> / <|assistant|> format (Zephyr, Phi-3)";
  } else if (jinja_has(jinja, "<|START_OF_TURN_TOKEN|>")) {
    refused = "Cohere's <|START_OF_TURN_TOKEN|>";
  } else {
    refused = "one ax does not recognise";
  }
  return InvalidArgument("chat template of ", from, ": ", refused,
                         " is not a template ax renders (it matches simple, llama3 or chatml "
                         "only); give --template a built-in name or a JSON template file of "
                         "that format (docs/fine-tuning.md)");
}

namespace {

// A Hugging Face model's chat template: the Jinja source in tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} of which "default" is used) or in a
// chat_template.jinja; `path` is either file or a directory holding one.
StatusOr<std::optional<std::pair<std::string, std::string>>> hf_chat_template(
    const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> candidates = {path};
  if (fs::is_directory(path, ec)) {
    candidates = {(fs::path(path) / "tokenizer_config.json").string(),
                  (fs::path(path) / "chat_template.jinja").string()};
  } else if (!ends_with(path, ".jinja") && !ends_with(path, "tokenizer_config.json")) {
    return std::optional<std::pair<std::string, std::string>>();  // a JSON template file
  }
  for (const std::string& file : candidates) {
    if (!fs::exists(file, ec)) continue;
    AX_ASSIGN_OR_RETURN(std::string text, read_file(file));
    if (ends_with(file, ".jinja")) return std::optional(std::pair(file, text));
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return InvalidArgument(file, ": not a JSON object");
    auto it = j.find("chat_template");
    if (it == j.end()) continue;
    if (it->is_string()) return std::optional(std::pair(file, it->get<std::string>()));
    if (it->is_array()) {
      for (const json& named : *it) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          return std::optional(std::pair(file, named["template"].get<std::string>()));
        }
      }
    }
    return InvalidArgument(file,
                           ": chat_template is neither a string nor a list holding a "
                           "\"default\" template");
  }
  return NotFound("chat template: ", path, " holds no chat_template (tokenizer_config.json or ",
                  "chat_template.jinja)");
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::load(const std::string& name_or_file) {
  if (name_or_file == "simple") return simple_template();
  if (name_or_file == "llama3") return llama3_template();
  if (name_or_file == "chatml") return chatml_template();
  AX_ASSIGN_OR_RETURN(auto hf, hf_chat_template(name_or_file));
  if (hf) return match_hf_chat_template(hf->second, hf->first);
  StatusOr<std::string> text = read_file(name_or_file);
  if (!text.ok()) {
    return text.status().with_context(
        "chat template (simple, llama3, chatml, a JSON template file, or a Hugging Face "
        "model's tokenizer_config.json or directory)");
  }
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("chat template ", name_or_file, ": not a JSON object");
  if (j.contains("chat_template") && j["chat_template"].is_string()) {
    return match_hf_chat_template(j["chat_template"].get<std::string>(), name_or_file);
  }
  ChatTemplate t;
  for (auto& [key, value] : j.items()) {
    if (key == "trim") {
      if (!value.is_boolean()) {
        return InvalidArgument("chat template ", name_or_file, ": \"trim\" is not true or false");
      }
      t.trim = value.get<bool>();
      continue;
    }
    std::string* slot = key == "begin"            ? &t.begin
                        : key == "system"         ? &t.system
                        : key == "user"           ? &t.user
                        : key == "assistant"      ? &t.assistant
                        : key == "default_system" ? &t.default_system
                                                  : nullptr;
    if (slot == nullptr) {
      return InvalidArgument("chat template ", name_or_file, ": unknown key \"", key,
                             "\" (begin, system, user, assistant, default_system, trim)");
    }
    if (!value.is_string()) {
      return InvalidArgument("chat template ", name_or_file, ": \"", key, "\" is not a string");
    }
    *slot = value.get<std::string>();
  }
  for (const auto& [role, text] : {std::pair<std::string, const std::string*>{"system", &t.system},
                                   {"user", &t.user},
                                   {"assistant", &t.assistant}}) {
    AX_RETURN_IF_ERROR(check_role_text(role, *text, name_or_file));
  }
  return t;
}

Status ChatTemplate::render(const std::vector<ChatMessage>& messages, std::string* prompt,
                            std::string* response) const {
  size_t last = messages.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgument("message ", i, " has role '", role, "' (system, user or assistant)");
    }
    if (role == "assistant") last = i;
  }
  if (last == messages.size()) return InvalidArgument("no assistant message to train on");
  *prompt = begin;
  auto content = [&](const std::string& c) { return trim ? jinja_trimmed(c) : c; };
  if (!default_system.empty() && messages[0].role != "system") {
    std::string text = system;
    text.replace(text.find(kContent), kContent.size(), content(default_system));
    *prompt += text;
  }
  for (size_t i = 0; i < last; ++i) {
    const ChatMessage& m = messages[i];
    std::string text = m.role == "system" ? system : m.role == "user" ? user : assistant;
    text.replace(text.find(kContent), kContent.size(), content(m.content));
    *prompt += text;
  }
  const size_t at = assistant.find(kContent);
  *prompt += assistant.substr(0, at);
  *response = content(messages[last].content) + assistant.substr(at + kContent.size());
  return Status::Ok();
}

Status render_chat_file(const std::string& input, const std::string& output,
                        const ChatTemplate& chat_template, const std::string& messages_field,
                        bool skip_bad, RenderChatStats* stats) {
  if (!ends_with(input, ".jsonl") && !ends_with(input, ".json")) {
    return InvalidArgument(input, ": --format chat reads JSON lines (.jsonl)");
  }
  std::ifstream in(input, std::ios::binary);
  if (!in) return NotFound(input, ": cannot open");
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  if (!out) return IoError(str_cat("create ", output), errno);
  std::string line, prompt, response;
  for (uint64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    StatusOr<std::vector<ChatMessage>> messages =
        record.is_discarded() ? StatusOr<std::vector<ChatMessage>>(InvalidArgument("invalid JSON"))
                              : messages_of(record, messages_field);
    Status s =
        messages.ok() ? chat_template.render(*messages, &prompt, &response) : messages.status();
    if (!s.ok()) {
      if (!skip_bad) {
        out.close();
        std::remove(output.c_str());  // no half-rendered file is left behind
        return s.with_context(str_cat(input, ":", line_no));
      }
      ++stats->skipped_bad;
      continue;
    }
    out << json{{"prompt", prompt}, {"response", response}}.dump(-1, ' ', false,
                                                                 json::error_handler_t::replace)
        << "\n";
    ++stats->records;
  }
  out.flush();
  if (!out) return IoError(str_cat("write ", output), errno);
  return Status::Ok();
}

}  // namespace ax::data
