#include "ax/datasets/text/chat_template.h"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"

namespace ax::data {
namespace {

using json = nlohmann::json;
constexpr std::string_view kContent = "{content}";

ChatTemplate simple_template() {
  return {.begin = "",
          .system = "{content}\n\n",
          .user = "User: {content}\n",
          .assistant = "Assistant: {content}\n"};
}

// Meta's Llama 3 chat format (its tokenizer_config.json chat_template) without the tokenizer's
// BOS, which the template writes as text: <|begin_of_text|> first, each message in a header
// block ended by <|eot_id|>.
ChatTemplate llama3_template() {
  return {.begin = "<|begin_of_text|>",
          .system = "<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
          .user = "<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
          .assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n{content}<|eot_id|>"};
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

std::vector<std::string> ChatTemplate::names() { return {"simple", "llama3"}; }

StatusOr<ChatTemplate> ChatTemplate::load(const std::string& name_or_file) {
  if (name_or_file == "simple") return simple_template();
  if (name_or_file == "llama3") return llama3_template();
  StatusOr<std::string> text = read_file(name_or_file);
  if (!text.ok()) {
    return text.status().with_context("chat template (a file, or simple or llama3)");
  }
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("chat template ", name_or_file, ": not a JSON object");
  ChatTemplate t;
  for (auto& [key, value] : j.items()) {
    std::string* slot = key == "begin"       ? &t.begin
                        : key == "system"    ? &t.system
                        : key == "user"      ? &t.user
                        : key == "assistant" ? &t.assistant
                                             : nullptr;
    if (slot == nullptr) {
      return InvalidArgument("chat template ", name_or_file, ": unknown key \"", key,
                             "\" (begin, system, user, assistant)");
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
  for (size_t i = 0; i < last; ++i) {
    const ChatMessage& m = messages[i];
    std::string text = m.role == "system" ? system : m.role == "user" ? user : assistant;
    text.replace(text.find(kContent), kContent.size(), m.content);
    *prompt += text;
  }
  const size_t at = assistant.find(kContent);
  *prompt += assistant.substr(0, at);
  *response = messages[last].content + assistant.substr(at + kContent.size());
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
