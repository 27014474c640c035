// Chat conversations rendered into (prompt, response) pairs: the built-in templates by hand, a
// template file, multi-turn conversations (the last assistant message is the response), and the
// errors a user can make.
#include "ax/datasets/text/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ax::data {
namespace {

const std::vector<ChatMessage> kTwoTurns = {{"system", "Be brief."},
                                            {"user", "Hi"},
                                            {"assistant", "Hello."},
                                            {"user", "2+2?"},
                                            {"assistant", "4"}};

TEST(ChatTemplate, SimpleRendersEveryTurnBeforeTheLastAnswer) {
  StatusOr<ChatTemplate> t = ChatTemplate::load("simple");
  ASSERT_TRUE(t.ok());
  std::string prompt, response;
  ASSERT_TRUE(t->render(kTwoTurns, &prompt, &response).ok());
  EXPECT_EQ(prompt, "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: 2+2?\nAssistant: ");
  EXPECT_EQ(response, "4\n");
}

TEST(ChatTemplate, Llama3) {
  StatusOr<ChatTemplate> t = ChatTemplate::load("llama3");
  ASSERT_TRUE(t.ok());
  std::string prompt, response;
  ASSERT_TRUE(t->render({{"user", "Hi"}, {"assistant", "Hello."}}, &prompt, &response).ok());
  EXPECT_EQ(prompt,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(response, "Hello.<|eot_id|>");
}

TEST(ChatTemplate, FileTemplateAndTrailingMessagesDropped) {
  const std::string dir = testing::temp_dir("chat-template");
  testing::write_file(dir + "/t.json",
                      R"({"begin": "<s>", "system": "[S]{content}", "user": "[U]{content}",
                          "assistant": "[A]{content}[/A]"})");
  StatusOr<ChatTemplate> t = ChatTemplate::load(dir + "/t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::string prompt, response;
  ASSERT_TRUE(
      t->render({{"user", "q"}, {"assistant", "a"}, {"user", "unanswered"}}, &prompt, &response)
          .ok());
  EXPECT_EQ(prompt, "<s>[U]q[A]");
  EXPECT_EQ(response, "a[/A]");
}

TEST(ChatTemplate, Errors) {
  const std::string dir = testing::temp_dir("chat-template-errors");
  testing::write_file(dir + "/no-content.json",
                      R"({"system": "{content}", "user": "{content}", "assistant": "A:"})");
  testing::write_file(dir + "/unknown.json", R"({"tool": "{content}"})");
  StatusOr<ChatTemplate> a = ChatTemplate::load(dir + "/no-content.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("\"assistant\" must hold \"{content}\" once"),
            std::string::npos)
      << a.status().to_string();
  StatusOr<ChatTemplate> b = ChatTemplate::load(dir + "/unknown.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("unknown key \"tool\""), std::string::npos);
  EXPECT_FALSE(ChatTemplate::load(dir + "/missing.json").ok());

  StatusOr<ChatTemplate> t = ChatTemplate::load("simple");
  ASSERT_TRUE(t.ok());
  std::string prompt, response;
  Status s = t->render({{"user", "q"}}, &prompt, &response);
  EXPECT_NE(s.message().find("no assistant message"), std::string::npos) << s.to_string();
  s = t->render({{"tool", "x"}, {"assistant", "a"}}, &prompt, &response);
  EXPECT_NE(s.message().find("message 0 has role 'tool'"), std::string::npos) << s.to_string();
}

TEST(ChatTemplate, Llama3TrimsEachMessageAsMetasTemplateDoes) {
  StatusOr<ChatTemplate> t = ChatTemplate::load("llama3");
  ASSERT_TRUE(t.ok());
  std::string prompt, response;
  ASSERT_TRUE(t->render({{"user", "  Hi\n"}, {"assistant", "\tHello. "}}, &prompt, &response).ok());
  EXPECT_EQ(prompt,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(response, "Hello.<|eot_id|>");
}

TEST(ChatTemplate, ChatMLAsQwenWritesIt) {
  StatusOr<ChatTemplate> t = ChatTemplate::load("chatml");
  ASSERT_TRUE(t.ok());
  std::string prompt, response;
  ASSERT_TRUE(t->render(kTwoTurns, &prompt, &response).ok());
  EXPECT_EQ(prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(response, "4<|im_end|>\n");
  EXPECT_EQ(ChatTemplate::names(), (std::vector<std::string>{"simple", "llama3", "chatml"}));
}

// Jinja chat templates as Hugging Face models ship them in tokenizer_config.json: Meta's Llama 3
// template and the start of Qwen2.5's (verbatim in their markers and default system message).
constexpr const char* kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";
constexpr const char* kQwen25Jinja =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == "
    "'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are "
    "Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- "
    "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages "
    "%}\n    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
    "'\\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- "
    "'<|im_start|>assistant\\n' }}\n{%- endif %}\n";

TEST(ChatTemplate, AModelsTokenizerConfigIsMatchedToABuiltInOne) {
  const std::string dir = testing::temp_dir("chat-hf");
  nlohmann::json qwen = {{"eos_token", "<|im_end|>"}, {"chat_template", kQwen25Jinja}};
  std::filesystem::create_directories(dir + "/qwen");
  testing::write_file(dir + "/qwen/tokenizer_config.json", qwen.dump());
  for (const std::string& path : {dir + "/qwen", dir + "/qwen/tokenizer_config.json"}) {
    StatusOr<ChatTemplate> t = ChatTemplate::load(path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->default_system,
              "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    std::string prompt, response;
    ASSERT_TRUE(t->render({{"user", "Hi"}, {"assistant", "Hello."}}, &prompt, &response).ok());
    EXPECT_EQ(prompt,
              "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
              "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(response, "Hello.<|im_end|>\n");
    // A system message of its own replaces the default.
    ASSERT_TRUE(t->render(kTwoTurns, &prompt, &response).ok());
    EXPECT_EQ(prompt.find("You are Qwen"), std::string::npos) << prompt;
  }
  // Llama 3's, from a chat_template.jinja; and a list of named templates (the "default" one).
  std::filesystem::create_directories(dir + "/llama");
  testing::write_file(dir + "/llama/chat_template.jinja", kLlama3Jinja);
  StatusOr<ChatTemplate> llama = ChatTemplate::load(dir + "/llama");
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  StatusOr<ChatTemplate> builtin = ChatTemplate::load("llama3");
  std::string p1, r1, p2, r2;
  ASSERT_TRUE(llama->render(kTwoTurns, &p1, &r1).ok());
  ASSERT_TRUE(builtin->render(kTwoTurns, &p2, &r2).ok());
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(r1, r2);
  nlohmann::json named = {{"chat_template",
                           {{{"name", "tool_use"}, {"template", "[INST]"}},
                            {{"name", "default"}, {"template", kLlama3Jinja}}}}};
  std::filesystem::create_directories(dir + "/named");
  testing::write_file(dir + "/named/tokenizer_config.json", named.dump());
  EXPECT_TRUE(ChatTemplate::load(dir + "/named").ok());
}

TEST(ChatTemplate, OtherModelsTemplatesAreRefusedByName) {
  struct Case {
    std::string jinja;
    const char* named;
  };
  const Case cases[] = {
      {std::string(kQwen25Jinja) + "{{- '<think>\\n\\n</think>\\n\\n' }}", "ChatML with thinking"},
      {std::string("{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting "
                   "Knowledge Date: December 2023\\n' }}") +
           kLlama3Jinja,
       "Llama 3.1 or later"},
      {"{{ bos_token }}{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor "
       "%}",
       "[INST]"},
      {"{{ '<start_of_turn>user\\n' }}", "Gemma"},
      {"{{ '<|user|>\\n' + message['content'] + eos_token }}", "<|user|>"},
      {"{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% endfor %}",
       "one ax does not recognise"},
  };
  const std::string dir = testing::temp_dir("chat-hf-refused");
  for (const Case& c : cases) {
    testing::write_file(dir + "/tokenizer_config.json",
                        nlohmann::json({{"chat_template", c.jinja}}).dump());
    StatusOr<ChatTemplate> t = ChatTemplate::load(dir);
    ASSERT_FALSE(t.ok()) << c.named;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.named), std::string::npos) << t.status().to_string();
    EXPECT_NE(t.status().message().find("tokenizer_config.json"), std::string::npos);
  }
  testing::write_file(dir + "/tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
  StatusOr<ChatTemplate> none = ChatTemplate::load(dir);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().to_string();
}

TEST(ChatTemplate, RenderFileWritesPairsAndNamesBadLines) {
  const std::string dir = testing::temp_dir("chat-render");
  testing::write_file(dir + "/chat.jsonl",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Say \\\"hi\\\"\"}, "
                      "{\"role\": \"assistant\", \"content\": \"hi\"}]}\n"
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"no answer\"}]}\n");
  StatusOr<ChatTemplate> t = ChatTemplate::load("simple");
  ASSERT_TRUE(t.ok());
  RenderChatStats stats;
  Status s =
      render_chat_file(dir + "/chat.jsonl", dir + "/out.jsonl", *t, "messages", false, &stats);
  EXPECT_NE(s.message().find("chat.jsonl:2: no assistant message"), std::string::npos)
      << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.jsonl")) << "no half-rendered file";
  stats = {};
  ASSERT_TRUE(
      render_chat_file(dir + "/chat.jsonl", dir + "/out.jsonl", *t, "messages", true, &stats).ok());
  EXPECT_EQ(stats.records, 1u);
  EXPECT_EQ(stats.skipped_bad, 1u);
  EXPECT_EQ(testing::read_file(dir + "/out.jsonl"),
            "{\"prompt\":\"User: Say \\\"hi\\\"\\nAssistant: \",\"response\":\"hi\\n\"}\n");
}

}  // namespace
}  // namespace ax::data
