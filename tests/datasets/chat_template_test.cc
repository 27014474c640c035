// Chat conversations rendered into (prompt, response) pairs: the built-in templates by hand, a
// template file, multi-turn conversations (the last assistant message is the response), and the
// errors a user can make.
#include "ax/datasets/text/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>

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
