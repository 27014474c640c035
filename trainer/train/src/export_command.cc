#include "ax/trainer/train/export_command.h"

#include <filesystem>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/config/config.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;

// `from` copied to out_dir/name under a temporary name first, as the weights are.
Status copy_into(const fs::path& from, const std::string& out_dir, const std::string& name) {
  AX_ASSIGN_OR_RETURN(std::string bytes, read_file(from.string()));
  return write_file_atomically((fs::path(out_dir) / name).string(), bytes);
}

}  // namespace

StatusOr<ExportResult> export_run_with_tokenizer(const std::string& run_dir,
                                                 std::optional<int64_t> step,
                                                 const std::string& out_dir) {
  ExportResult result;
  AX_ASSIGN_OR_RETURN(result.step, export_run(run_dir, step, out_dir));
  const std::string config_path =
      (fs::path(CheckpointManager(run_dir, 1).step_dir(result.step)) / "config.json").string();
  AX_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
  StatusOr<Config> config = from_json(text);
  if (!config.ok()) return config.status().with_context(config_path);
  const std::string& tokenizer = config->data.tokenizer;
  if (tokenizer.empty()) {
    result.note = "the run has no data.tokenizer: none written";
    return result;
  }
  StatusOr<std::string> file = data::Tokenizer::resolve_path(tokenizer);
  std::error_code ec;
  if (file.ok() && !fs::is_regular_file(*file, ec)) file = NotFound(*file, " does not exist");
  if (!file.ok()) {
    result.note = str_cat("the run's tokenizer ", tokenizer, " is not there (",
                          file.status().message(), "): none written; give one to --tokenizer");
    return result;
  }
  const fs::path from(*file);
  if (from.extension() == ".json") {
    result.tokenizer = "tokenizer.json";
  } else {
    result.tokenizer =
        config->model.family == ModelFamily::kT5 ? "spiece.model" : "tokenizer.model";
  }
  AX_RETURN_IF_ERROR(copy_into(from, out_dir, result.tokenizer));
  const fs::path tokenizer_config = from.parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(tokenizer_config, ec)) {
    AX_RETURN_IF_ERROR(copy_into(tokenizer_config, out_dir, "tokenizer_config.json"));
  }
  return result;
}

}  // namespace ax::train
