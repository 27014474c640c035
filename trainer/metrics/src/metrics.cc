// The progress line, metrics.jsonl and the TensorBoard scalars of a run.
#include "ax/trainer/metrics/metrics.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "append_file.h"

namespace ax::train {
namespace {

using Json = nlohmann::ordered_json;

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "950", "9.9k", "150.7k", "1.23M"; thresholds on the rounded value so 999.96 is "1.0k".
std::string rate_with_suffix(double v) {
  if (v < 999.5) return printf_string("%.0f", v);
  if (v < 999.95e3) return printf_string("%.1fk", v / 1e3);
  return printf_string("%.2fM", v / 1e6);
}

// "412 ms" below a second, "1.78 s" above.
std::string step_time(double seconds) {
  if (seconds < 0.9995) return printf_string("%.0f ms", seconds * 1e3);
  return printf_string("%.2f s", seconds);
}

// "989 TFLOP/s"; CPU peaks read better in GFLOP/s.
std::string flops_rate(double flops) {
  if (flops >= 1e12) return printf_string("%.0f TFLOP/s", flops / 1e12);
  return printf_string("%.0f GFLOP/s", flops / 1e9);
}

}  // namespace

std::string format_progress(const StepMetrics& m) {
  int width = static_cast<int>(std::to_string(m.max_steps).size());
  char step[64];
  if (m.max_steps > 0) {
    std::snprintf(step, sizeof step, "step %*lld/%lld", width, static_cast<long long>(m.step),
                  static_cast<long long>(m.max_steps));
  } else {
    std::snprintf(step, sizeof step, "step %lld", static_cast<long long>(m.step));
  }
  std::string mfu = m.peak_flops > 0 ? str_cat(printf_string("MFU %.1f%%", 100.0 * m.mfu), " of ",
                                               flops_rate(m.peak_flops))
                                     : std::string("MFU n/a");
  return str_cat(step, " | loss ", printf_string("%.4f", m.loss), " | lr ",
                 printf_string("%.2e", m.lr), " | gnorm ", printf_string("%.3f", m.grad_norm),
                 " | ", step_time(m.step_time_s), " | ", rate_with_suffix(m.tokens_per_s),
                 " tok/s | ", mfu, " | ETA ", human_duration(m.eta_s));
}

class MetricsLogger::Impl {
 public:
  Impl(AppendFile jsonl, std::unique_ptr<TensorBoardWriter> tensorboard)
      : jsonl_(std::move(jsonl)), tensorboard_(std::move(tensorboard)) {}

  // One write() per line: a crash tears at most the line being written.
  Status write_line(const Json& record) { return jsonl_.append(record.dump() + "\n"); }
  TensorBoardWriter& tensorboard() { return *tensorboard_; }
  Status flush() {
    AX_RETURN_IF_ERROR(jsonl_.sync());
    return tensorboard_->flush();
  }

 private:
  AppendFile jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::open(const std::string& run_dir) {
  AX_RETURN_IF_ERROR(make_dirs(run_dir));
  AX_ASSIGN_OR_RETURN(AppendFile jsonl,
                      AppendFile::open(str_cat(run_dir, "/metrics.jsonl"), /*exclusive=*/false));
  // A run that crashed mid-line left a torn record; start the resumed run on a fresh line so
  // that only the torn line fails to parse.
  AX_ASSIGN_OR_RETURN(bool clean, jsonl.ends_with_or_empty('\n'));
  if (!clean) AX_RETURN_IF_ERROR(jsonl.append("\n"));
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TensorBoardWriter> tensorboard,
                      TensorBoardWriter::open(str_cat(run_dir, "/tensorboard")));
  auto impl = std::make_unique<Impl>(std::move(jsonl), std::move(tensorboard));
  return std::unique_ptr<MetricsLogger>(new MetricsLogger(std::move(impl)));
}

MetricsLogger::MetricsLogger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsLogger::~MetricsLogger() = default;

Status MetricsLogger::log_train(const StepMetrics& m) {
  const std::pair<const char*, double> scalars[] = {
      {"loss", m.loss},
      {"lr", m.lr},
      {"grad_norm", m.grad_norm},
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"mfu", m.mfu},
  };
  Json record;
  record["step"] = m.step;
  for (const auto& [name, value] : scalars) record[name] = value;
  AX_RETURN_IF_ERROR(impl_->write_line(record));
  for (const auto& [name, value] : scalars) {
    AX_RETURN_IF_ERROR(impl_->tensorboard().add_scalar(str_cat("train/", name), m.step, value));
  }
  return Status::Ok();
}

Status MetricsLogger::log_eval(int64_t step, double val_loss) {
  double ppl = std::exp(val_loss);
  Json record;
  record["step"] = step;
  record["val_loss"] = val_loss;
  record["val_ppl"] = ppl;
  AX_RETURN_IF_ERROR(impl_->write_line(record));
  AX_RETURN_IF_ERROR(impl_->tensorboard().add_scalar("eval/loss", step, val_loss));
  return impl_->tensorboard().add_scalar("eval/ppl", step, ppl);
}

Status MetricsLogger::log_task(int64_t step, const std::string& task,
                               const std::vector<std::pair<std::string, double>>& scores) {
  Json record;
  record["step"] = step;
  record["task"] = task;
  for (const auto& [name, value] : scores) {
    if (value == std::floor(value) && std::fabs(value) < 0x1p53) {
      record[name] = static_cast<int64_t>(value);
    } else {
      record[name] = value;
    }
  }
  AX_RETURN_IF_ERROR(impl_->write_line(record));
  for (const auto& [name, value] : scores) {
    AX_RETURN_IF_ERROR(
        impl_->tensorboard().add_scalar(str_cat("eval/", task, "/", name), step, value));
  }
  return Status::Ok();
}

Status MetricsLogger::flush() { return impl_->flush(); }

}  // namespace ax::train
