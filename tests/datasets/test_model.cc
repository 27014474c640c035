#include "test_model.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "ax/datasets/text/tokenizer.h"
#include "test_util.h"

namespace ax::data::testing {

const std::string& small_model(const std::string& type) {
  static std::mutex mu;
  static std::map<std::string, std::string> models;
  std::lock_guard<std::mutex> lock(mu);
  auto it = models.find(type);
  if (it != models.end()) return it->second;
  const std::string dir = temp_dir("tokz-model");
  write_file(dir + "/train.txt", sample_english(40));
  TrainTokenizerOptions o;
  o.inputs = {dir + "/train.txt"};
  o.output = dir + "/spm.model";
  o.vocab_size = 400;
  o.model_type = type;
  o.threads = 2;
  Status st = train_tokenizer(o);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return models.emplace(type, o.output).first->second;
}

}  // namespace ax::data::testing
