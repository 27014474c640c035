// Chat conversations (a JSON list of {"role", "content"} messages) rendered as text by a
// template into a (prompt, response) pair for instruction tuning: the response is the last
// assistant message, the prompt everything before it. `ax-data tokenize --format chat`
// renders its jsonl inputs this way, then tokenizes the pairs as --format prompt-response does
// (docs/fine-tuning.md "Chat data and templates").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"

namespace ax::data {

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// Text around each message: a role's text with "{content}" replaced by the message.
struct ChatTemplate {
  std::string begin;  // once, at the start of the prompt
  std::string system, user, assistant;
  // The system message of a conversation that has none (Qwen2's "You are a helpful
  // assistant."); empty: none is added.
  std::string default_system;
  // Each message's content without its leading and trailing white space (Jinja's `| trim`, which
  // Llama 3's template applies).
  bool trim = false;

  // A built-in template by name ("simple", "llama3", "chatml"); a JSON file with the keys
  // "begin" (optional), "system", "user" and "assistant", each role's text holding "{content}"
  // once, and optionally "default_system" and "trim"; or a Hugging Face model's chat template
  // (a tokenizer_config.json holding "chat_template", a chat_template.jinja, or a directory
  // holding either), matched to a built-in one (match_hf_chat_template).
  static StatusOr<ChatTemplate> load(const std::string& name_or_file);
  // The built-in names.
  static std::vector<std::string> names();
  // A Jinja chat template (tokenizer_config.json's "chat_template") as the built-in template it
  // renders plain conversations as: Qwen2's and Qwen2.5's ChatML as "chatml" (with their default
  // system message), Llama 3's as "llama3". Any other is refused naming what it looks like
  // (Llama 3.1's dated system block, Qwen3's thinking, Mistral's [INST], Gemma's turns, ...):
  // InvalidArgument, `from` naming where it was read.
  static StatusOr<ChatTemplate> match_hf_chat_template(const std::string& jinja,
                                                       const std::string& from);

  // prompt = begin + every message before the last assistant one + the assistant text before
  // "{content}"; response = the last assistant message + the assistant text after "{content}".
  // Messages after the last assistant one have nothing to train on and are dropped.
  // InvalidArgument when there is no assistant message or a role is not one of the three.
  Status render(const std::vector<ChatMessage>& messages, std::string* prompt,
                std::string* response) const;
};

struct RenderChatStats {
  uint64_t records = 0;
  uint64_t skipped_bad = 0;  // with skip_bad: records that are not a valid conversation
};

// Reads `input` (JSON lines, one conversation per line in the field `messages_field`; "a.b"
// reaches into nested objects) and writes `output` as JSON lines {"prompt": ..., "response":
// ...}. Errors name the file and line (and remove `output`); with skip_bad a bad record is
// counted and skipped.
Status render_chat_file(const std::string& input, const std::string& output,
                        const ChatTemplate& chat_template, const std::string& messages_field,
                        bool skip_bad, RenderChatStats* stats);

}  // namespace ax::data
