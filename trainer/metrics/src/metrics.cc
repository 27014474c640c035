// The progress line, metrics.jsonl and the TensorBoard scalars of a run.
#include "ax/trainer/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "append_file.h"
#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"

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

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

PhaseSpread spread_of(const std::vector<RankTimes>& ranks, double RankTimes::*phase) {
  PhaseSpread p;
  std::vector<double> values;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double v = ranks[r].*phase;
    values.push_back(v);
    if (r == 0 || v > p.max_s) {
      p.max_s = v;
      p.max_rank = static_cast<int>(r);
    }
  }
  p.median_s = median_of(std::move(values));
  return p;
}

}  // namespace

RankSpread rank_spread(const std::vector<RankTimes>& ranks, double margin, double min_excess_s,
                       int previous_candidate) {
  RankSpread s;
  s.data = spread_of(ranks, &RankTimes::data_s);
  s.compute = spread_of(ranks, &RankTimes::compute_s);
  s.comm = spread_of(ranks, &RankTimes::comm_s);
  if (margin <= 0) return s;
  double worst = 0;
  const std::pair<const char*, std::pair<double RankTimes::*, const PhaseSpread*>> phases[] = {
      {"data", {&RankTimes::data_s, &s.data}}, {"compute", {&RankTimes::compute_s, &s.compute}}};
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& [name, phase] : phases) {
      const double v = ranks[r].*phase.first, median = phase.second->median_s;
      const double excess = v - median;
      if (excess <= margin * median || excess <= min_excess_s) continue;
      if (s.candidate >= 0) ++s.other_candidates;
      if (s.candidate < 0 || excess > worst) {
        worst = excess;
        s.candidate = static_cast<int>(r);
        s.candidate_phase = name;
        s.candidate_s = v;
        s.candidate_median_s = median;
      }
    }
  }
  if (s.candidate >= 0 && s.candidate == previous_candidate) s.straggler = s.candidate;
  return s;
}

std::string describe_straggler(const RankSpread& s) {
  if (s.candidate < 0) return "";
  std::string over =
      s.candidate_median_s > 0
          ? printf_string("+%.0f%%", 100.0 * (s.candidate_s / s.candidate_median_s - 1))
          : str_cat("+", step_time(s.candidate_s));
  return str_cat(
      s.candidate_phase, " ", step_time(s.candidate_s), "/step, ", over, " over the median ",
      step_time(s.candidate_median_s),
      s.other_candidates > 0 ? str_cat(" (+", s.other_candidates, " more)") : std::string());
}

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
  std::string line = str_cat(
      step, " | loss ", printf_string("%.4f", m.loss), " | lr ", printf_string("%.2e", m.lr),
      " | gnorm ", printf_string("%.3f", m.grad_norm), " | ", step_time(m.step_time_s), " | ",
      rate_with_suffix(m.tokens_per_s), " tok/s | ", mfu, " | ETA ", human_duration(m.eta_s));
  if (m.pipeline_wait) line += printf_string(" | bubble %.1f%%", 100.0 * *m.pipeline_wait);
  if (m.ranks && m.ranks->straggler >= 0) {
    line +=
        str_cat(" | straggler: rank ", m.ranks->straggler,
                m.straggler_where.empty() ? std::string() : str_cat(" (", m.straggler_where, ")"),
                " ", describe_straggler(*m.ranks));
  }
  return line;
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

namespace {

// Rewrites path without the records of steps after `step` (and without lines that do not parse:
// a line torn by a crash). Returns how many lines were dropped.
StatusOr<int64_t> drop_records_after(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return int64_t{0};  // no file yet
  std::string line, kept;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const Json record = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool later = record.is_object() && record.contains("step") &&
                       record["step"].is_number_integer() && record["step"].get<int64_t>() > step;
    if (record.is_discarded() || later) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped > 0) AX_RETURN_IF_ERROR(write_file_atomically(path, kept));
  return dropped;
}

}  // namespace

StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::open(const std::string& run_dir,
                                                             std::optional<int64_t> resumed_step) {
  AX_RETURN_IF_ERROR(make_dirs(run_dir));
  if (resumed_step) {
    const std::string path = str_cat(run_dir, "/metrics.jsonl");
    AX_ASSIGN_OR_RETURN(int64_t dropped, drop_records_after(path, *resumed_step));
    if (dropped > 0) {
      AX_LOG(kInfo, "metrics") << path << ": dropped " << dropped << " records after step "
                               << *resumed_step << " (the run redoes those steps)";
    }
  }
  AX_ASSIGN_OR_RETURN(AppendFile jsonl,
                      AppendFile::open(str_cat(run_dir, "/metrics.jsonl"), /*exclusive=*/false));
  // A run that crashed mid-line left a torn record; start the resumed run on a fresh line so
  // that only the torn line fails to parse.
  AX_ASSIGN_OR_RETURN(bool clean, jsonl.ends_with_or_empty('\n'));
  if (!clean) AX_RETURN_IF_ERROR(jsonl.append("\n"));
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TensorBoardWriter> tensorboard,
                      TensorBoardWriter::open(str_cat(run_dir, "/tensorboard")));
  if (resumed_step) AX_RETURN_IF_ERROR(tensorboard->add_session_start(*resumed_step + 1));
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
  std::vector<std::pair<std::string, double>> rank_scalars;
  if (m.pipeline_wait) {
    record["pipeline_wait"] = *m.pipeline_wait;
    rank_scalars.push_back({"train/pipeline_wait", *m.pipeline_wait});
  }
  if (m.ranks) {
    const RankSpread& r = *m.ranks;
    Json ranks;
    for (const auto& [name, phase] : {std::pair<const char*, const PhaseSpread*>{"data_s", &r.data},
                                      {"compute_s", &r.compute},
                                      {"comm_s", &r.comm}}) {
      ranks[name] = {
          {"median", phase->median_s}, {"max", phase->max_s}, {"max_rank", phase->max_rank}};
      rank_scalars.push_back({str_cat("ranks/", name, "_median"), phase->median_s});
      rank_scalars.push_back({str_cat("ranks/", name, "_max"), phase->max_s});
    }
    record["ranks"] = ranks;
    Json straggler = {{"rank", r.straggler}};
    if (r.straggler >= 0) {
      straggler["phase"] = r.candidate_phase;
      straggler["s"] = r.candidate_s;
      straggler["median_s"] = r.candidate_median_s;
    }
    record["straggler"] = straggler;
    rank_scalars.push_back({"ranks/straggler", static_cast<double>(r.straggler)});
  }
  AX_RETURN_IF_ERROR(impl_->write_line(record));
  for (const auto& [name, value] : scalars) {
    AX_RETURN_IF_ERROR(impl_->tensorboard().add_scalar(str_cat("train/", name), m.step, value));
  }
  for (const auto& [tag, value] : rank_scalars) {
    AX_RETURN_IF_ERROR(impl_->tensorboard().add_scalar(tag, m.step, value));
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
