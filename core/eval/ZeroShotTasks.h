#pragma once
// The zero-shot tasks of SPEC §7 read from their files and turned into the requests
// lm-evaluation-harness builds from its default task configs (0-shot, no description): for each
// document, the contexts and continuations whose log-likelihoods are compared. No model and no
// tokenizer here (eval/ZeroShot scores the requests).
#include <string>
#include <vector>

namespace latmix::eval {

// How a task is scored (the harness's output types).
enum class TaskKind {
    MultipleChoice, // one context, one continuation per choice: acc (and acc_norm when normalised)
    PartialContext, // one context per choice, one shared continuation (WinoGrande): acc
    Completion,     // one context, one continuation (LAMBADA): acc = greedy, perplexity
};

// One document's requests. MultipleChoice: contexts.size() == 1, continuations one per choice.
// PartialContext: contexts one per choice, continuations.size() == 1. Completion: one of each.
// Continuations carry the target delimiter (" ") in front, as the harness sends them.
struct ZeroShotDoc {
    std::vector<std::string> contexts, continuations;
    // The choices without the delimiter: acc_norm divides a choice's log-likelihood by its
    // length in UTF-8 bytes (the harness's len(choice); the same for ASCII text).
    std::vector<std::string> choices;
    int gold = 0;
    int line = 0; // where the document starts in its file (1-based), for messages
};

struct ZeroShotTask {
    std::string name; // the harness's task name: arc_easy, piqa, lambada_openai, ...
    TaskKind kind = TaskKind::MultipleChoice;
    bool accNorm = false; // the harness reports acc_norm for this task
    std::string source;   // the file read
    std::vector<ZeroShotDoc> docs;
};

// arc_easy, arc_challenge, piqa, boolq, hellaswag, lambada_openai, winogrande.
const std::vector<std::string>& zeroShotTaskNames();

// "arc_easy,piqa" -> names, checked (an unknown name throws naming the known ones).
std::vector<std::string> parseTaskList(const std::string& list);

// The task's documents from dataDir/zeroshot/<folder>/<file> (each folder's PROVENANCE.txt
// names its format; WinoGrande reads winogrande/dev.jsonl). limit > 0: the first `limit`
// documents only (the harness's --limit). Throws std::runtime_error naming the file, line and
// field when a document does not match its format (missing field, label out of range, empty
// choice list), and naming the path when the file is absent.
ZeroShotTask loadZeroShotTask(const std::string& name, const std::string& dataDir, int limit = 0);

// Every task of a "arc_easy,piqa" list (parseTaskList), loaded as above.
std::vector<ZeroShotTask> loadZeroShotTasks(const std::string& list, const std::string& dataDir, int limit = 0);

// The same from an explicit file (tests; a task file kept elsewhere). PIQA's labels are read
// from valid-labels.lst beside the file.
ZeroShotTask readZeroShotTask(const std::string& name, const std::string& path, int limit = 0);

} // namespace latmix::eval
