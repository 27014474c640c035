// Fine-tuning and evaluation tasks in their official files, turned into the jsonl that
// `ax-data tokenize` reads (`ax-data convert-task`; formats in docs/evaluation.md):
//   mnli     GLUE's MNLI tsv or MultiNLI's jsonl  -> {"inputs", "targets", "idx"[, "pair_id"]}
//   squad    SQuAD v1.1 JSON                       -> {"inputs", "targets", "id", "answers",
//                                                      "raw_answers"}
//   lambada  the OpenAI jsonl or LAMBADA plain text -> {"text", "context", "last_word"}
// The MNLI and SQuAD strings are T5's (t5/data/preprocessors.py: glue, squad), byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ax/common/status.h"

namespace ax::data {

enum class TaskName { kMnli, kSquad, kLambada };

struct ConvertTaskOptions {
  TaskName task = TaskName::kMnli;
  std::string input;          // the official file
  std::string output;         // jsonl, replaced atomically
  bool ascii_quotes = false;  // lambada: “ ” -> " and ‘ ’ -> ' first, as Pax's reader does
};

struct ConvertTaskSummary {
  std::string input_format;  // "GLUE tsv", "MultiNLI jsonl", "SQuAD JSON", ...
  uint64_t written = 0;
  // Examples left out: MNLI pairs without a gold label ('-'), SQuAD questions without answers.
  uint64_t skipped = 0;
};

// Converts options.input (the format is told by its content: a tsv header, JSON lines, one JSON
// document, plain lines) and writes options.output, built in memory, atomically. Errors name the
// file and line; nothing is written then.
StatusOr<ConvertTaskSummary> convert_task(const ConvertTaskOptions& options);

// T5's _pad_punctuation: a space on both sides of every ASCII punctuation character (RE2's
// [[:punct:]]), then each run of RE2 white space (\t \n \f \r and space) made one space. Ends
// are not trimmed.
std::string t5_pad_punctuation(std::string_view text);

// "mnli hypothesis: {hypothesis} premise: {premise}" (glue(): the sorted feature names, joined
// by single spaces, nothing else changed).
std::string mnli_inputs(std::string_view hypothesis, std::string_view premise);

// "question: {q} context: {c}" with both padded (t5_pad_punctuation), joined by spaces and each
// run of white space made one space (squad(), _string_join).
std::string squad_inputs(std::string_view question, std::string_view context);

// A Lambada text cut before its last word. The text's ends are trimmed of ASCII white space;
// the word is what follows the last white space (punctuation attached to it stays part of it;
// the OpenAI file has none after the last word) and the context is what precedes it, trimmed.
// The evaluation scores " " + word after the context, as lm-evaluation-harness and Pax do.
struct LastWord {
  std::string context;
  std::string word;
};
// Error (InvalidArgument) when the trimmed text is a single word.
StatusOr<LastWord> split_last_word(std::string_view text);

// Pax's Lambada quote normalisation: “ and ” become ", ‘ and ’ become '.
std::string ascii_quotes(std::string_view text);

}  // namespace ax::data
