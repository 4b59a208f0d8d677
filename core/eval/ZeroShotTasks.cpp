#include "eval/ZeroShotTasks.h"

#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace latmix::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where each task lives under dataDir/zeroshot and how the harness scores it.
struct TaskFile {
    const char* name;
    const char* relative;
};
const TaskFile kFiles[] = {
    {"arc_easy", "zeroshot/arc_easy/ARC-Easy-Test.jsonl"},
    {"arc_challenge", "zeroshot/arc_challenge/ARC-Challenge-Test.jsonl"},
    {"piqa", "zeroshot/piqa/valid.jsonl"},
    {"boolq", "zeroshot/boolq/val.jsonl"},
    {"hellaswag", "zeroshot/hellaswag/hellaswag_val_full.txt"},
    {"lambada_openai", "zeroshot/lambada/lambada_test.jsonl"},
    {"winogrande", "zeroshot/winogrande/dev.jsonl"},
};

[[noreturn]] void bad(const std::string& path, int line, const std::string& what) {
    throw std::runtime_error(path + ":" + std::to_string(line) + ": " + what);
}

// Reads the lines of a file; the last one without its "\n" too.
std::vector<std::string> readLines(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read " + what + " " + path +
                                 " (zero-shot data is looked up under LATMIX_DATA_DIR/zeroshot; see its PROVENANCE.txt files)");
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) {
        if (!l.empty() && l.back() == '\r') l.pop_back();
        lines.push_back(std::move(l));
    }
    return lines;
}

std::string textField(const json& j, const char* field, const std::string& path, int line) {
    if (!j.contains(field)) bad(path, line, std::string("field '") + field + "' is missing");
    if (!j.at(field).is_string()) bad(path, line, std::string("field '") + field + "' is not a string");
    return j.at(field).get<std::string>();
}

// Each non-empty line parsed as one JSON object, handed to f(object, line number).
template <class F>
void forEachJsonLine(const std::string& path, int limit, const F& f) {
    const auto lines = readLines(path, "task file");
    int docs = 0;
    for (std::size_t i = 0; i < lines.size() && (limit <= 0 || docs < limit); ++i) {
        if (lines[i].find_first_not_of(" \t") == std::string::npos) continue;
        const int line = static_cast<int>(i + 1);
        json j;
        try {
            j = json::parse(lines[i]);
        } catch (const json::exception& e) {
            bad(path, line, std::string("not a JSON object (") + e.what() + ")");
        }
        if (!j.is_object()) bad(path, line, "not a JSON object");
        f(j, line);
        ++docs;
    }
}

// A multiple-choice document: one context, the target delimiter " " before each choice.
ZeroShotDoc multipleChoice(std::string context, std::vector<std::string> choices, int gold, int line,
                           const std::string& path) {
    if (choices.empty()) bad(path, line, "empty choice list");
    if (gold < 0 || gold >= static_cast<int>(choices.size()))
        bad(path, line, "label " + std::to_string(gold) + " is out of range for " + std::to_string(choices.size()) + " choices");
    ZeroShotDoc d;
    d.contexts = {std::move(context)};
    for (const auto& c : choices) d.continuations.push_back(" " + c);
    d.choices = std::move(choices);
    d.gold = gold;
    d.line = line;
    return d;
}

// ARC (AI2's JSONL: question{stem, choices[{text, label}]}, answerKey). The harness's arc_easy /
// arc_challenge: "Question: {{question}}\nAnswer:" -> " {{choice}}", gold = the answerKey's
// position among the labels (A-E or 1-5); acc and acc_norm.
void readArc(ZeroShotTask& t, int limit) {
    forEachJsonLine(t.source, limit, [&](const json& j, int line) {
        if (!j.contains("question") || !j["question"].is_object()) bad(t.source, line, "field 'question' is missing");
        const json& q = j["question"];
        const std::string stem = textField(q, "stem", t.source, line);
        if (!q.contains("choices") || !q["choices"].is_array()) bad(t.source, line, "field 'question.choices' is missing");
        const std::string key = textField(j, "answerKey", t.source, line);
        std::vector<std::string> texts;
        int gold = -1;
        for (const auto& c : q["choices"]) {
            if (!c.is_object()) bad(t.source, line, "field 'question.choices' holds a non-object");
            if (textField(c, "label", t.source, line) == key) gold = static_cast<int>(texts.size());
            texts.push_back(textField(c, "text", t.source, line));
        }
        if (!texts.empty() && gold < 0) bad(t.source, line, "answerKey '" + key + "' is not among the choices' labels");
        t.docs.push_back(multipleChoice("Question: " + stem + "\nAnswer:", std::move(texts), gold, line, t.source));
    });
}

// PIQA (valid.jsonl {goal, sol1, sol2} and valid-labels.lst, one 0/1 per line, aligned). The
// harness's piqa: "Question: {{goal}}\nAnswer:" -> " {{sol1}}" / " {{sol2}}"; acc, acc_norm.
void readPiqa(ZeroShotTask& t, int limit) {
    const std::string labelsPath = (fs::path(t.source).parent_path() / "valid-labels.lst").string();
    const auto labels = readLines(labelsPath, "PIQA labels");
    forEachJsonLine(t.source, limit, [&](const json& j, int line) {
        const std::size_t i = t.docs.size();
        if (i >= labels.size())
            bad(labelsPath, static_cast<int>(labels.size()), "has fewer labels than " + t.source + " has documents");
        const std::string& l = labels[i];
        if (l != "0" && l != "1") bad(labelsPath, static_cast<int>(i + 1), "label '" + l + "' is not 0 or 1");
        t.docs.push_back(multipleChoice("Question: " + textField(j, "goal", t.source, line) + "\nAnswer:",
                                        {textField(j, "sol1", t.source, line), textField(j, "sol2", t.source, line)},
                                        l == "1" ? 1 : 0, line, t.source));
    });
}

// BoolQ (SuperGLUE's val.jsonl: question, passage, label). The harness's boolq:
// "{{passage}}\nQuestion: {{question}}?\nAnswer:" -> " no" / " yes", gold = label (true: yes); acc.
void readBoolq(ZeroShotTask& t, int limit) {
    forEachJsonLine(t.source, limit, [&](const json& j, int line) {
        if (!j.contains("label")) bad(t.source, line, "field 'label' is missing");
        const json& l = j["label"];
        int gold = -1; // this copy stores "true"/"false"; SuperGLUE's own JSON booleans or 0/1 read too
        if (l.is_boolean()) gold = l.get<bool>() ? 1 : 0;
        else if (l.is_string() && (l == "true" || l == "false")) gold = l == "true" ? 1 : 0;
        else if (l.is_number_integer()) gold = l.get<int>();
        if (gold != 0 && gold != 1) bad(t.source, line, "field 'label' is not true/false (" + l.dump() + ")");
        t.docs.push_back(multipleChoice(textField(j, "passage", t.source, line) + "\nQuestion: " +
                                            textField(j, "question", t.source, line) + "?\nAnswer:",
                                        {"no", "yes"}, gold, line, t.source));
    });
}

// The harness's hellaswag preprocess: strip, " [title]" -> ". ", drop bracketed tags, "  " -> " ".
std::string hellaswagPreprocess(std::string s) {
    const auto b = s.find_first_not_of(" \t\n\r\f\v");
    if (b == std::string::npos) return {};
    s = s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
    for (std::size_t p; (p = s.find(" [title]")) != std::string::npos;) s.replace(p, 8, ". ");
    static const std::regex tag("\\[.*?\\]");
    s = std::regex_replace(s, tag, "");
    for (std::size_t p = 0; (p = s.find("  ", p)) != std::string::npos; ++p) s.replace(p, 2, " "); // Python's one pass
    return s;
}

// HellaSwag in llama.cpp's text form (6 lines a document: "activity_label: ctx", the gold label
// 0-3, the four endings). The harness's hellaswag: "{{query}}" -> " {{ending}}" after its
// preprocess; acc, acc_norm. Difference (the file's, see its PROVENANCE.txt): ctx_b keeps its
// lower-case first letter where the harness capitalises it.
void readHellaswag(ZeroShotTask& t, int limit) {
    const auto lines = readLines(t.source, "task file");
    if (lines.size() % 6 != 0 && !(lines.size() % 6 == 1 && lines.back().empty()))
        bad(t.source, static_cast<int>(lines.size()), "has " + std::to_string(lines.size()) +
                                                           " lines, not 6 a document (context, label, four endings)");
    for (std::size_t i = 0; i + 6 <= lines.size() && (limit <= 0 || static_cast<int>(t.docs.size()) < limit); i += 6) {
        const int line = static_cast<int>(i + 1);
        const std::string& l = lines[i + 1];
        if (l.size() != 1 || l[0] < '0' || l[0] > '3')
            bad(t.source, line + 1, "label '" + l + "' is not 0-3");
        std::vector<std::string> endings;
        for (int e = 0; e < 4; ++e) {
            endings.push_back(hellaswagPreprocess(lines[i + 2 + static_cast<std::size_t>(e)]));
            if (endings.back().empty()) bad(t.source, line + 2 + e, "ending " + std::to_string(e) + " is empty");
        }
        t.docs.push_back(multipleChoice(hellaswagPreprocess(lines[i]), std::move(endings), l[0] - '0', line, t.source));
    }
}

// LAMBADA, OpenAI's test set ({"text"}). The harness's lambada_openai: context = the text's
// words (split on ' ') but the last joined by ' ', continuation " " + last word (no further
// delimiter); acc = every token of the word is the greedy prediction; perplexity over documents.
void readLambada(ZeroShotTask& t, int limit) {
    forEachJsonLine(t.source, limit, [&](const json& j, int line) {
        const std::string text = textField(j, "text", t.source, line);
        const auto cut = text.rfind(' ');
        if (cut == std::string::npos || cut + 1 >= text.size())
            bad(t.source, line, "field 'text' has no last word after a space");
        ZeroShotDoc d;
        d.contexts = {text.substr(0, cut)};
        d.continuations = {text.substr(cut)}; // " " + the last word
        d.choices = {text.substr(cut + 1)};
        d.line = line;
        t.docs.push_back(std::move(d));
    });
}

// WinoGrande (dev.jsonl: sentence with one "_", option1, option2, answer "1"/"2"). The harness's
// winogrande, partial evaluation: each option substituted for "_" in the part before it is a
// context, and the part after the "_" (stripped, " " in front) the shared continuation; acc.
void readWinogrande(ZeroShotTask& t, int limit) {
    forEachJsonLine(t.source, limit, [&](const json& j, int line) {
        const std::string sentence = textField(j, "sentence", t.source, line);
        const auto blank = sentence.find('_');
        if (blank == std::string::npos) bad(t.source, line, "field 'sentence' has no '_' to fill");
        const std::string a = textField(j, "answer", t.source, line);
        if (a != "1" && a != "2") bad(t.source, line, "field 'answer' is '" + a + "', not 1 or 2");
        std::string rest = sentence.substr(blank + 1);
        rest.erase(0, rest.find_first_not_of(" \t\n"));
        rest.erase(rest.find_last_not_of(" \t\n") + 1);
        ZeroShotDoc d;
        d.choices = {textField(j, "option1", t.source, line), textField(j, "option2", t.source, line)};
        for (const auto& o : d.choices) d.contexts.push_back(sentence.substr(0, blank) + o);
        d.continuations = {" " + rest};
        d.gold = a == "1" ? 0 : 1;
        d.line = line;
        t.docs.push_back(std::move(d));
    });
}

} // namespace

const std::vector<std::string>& zeroShotTaskNames() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const auto& f : kFiles) n.push_back(f.name);
        return n;
    }();
    return names;
}

std::vector<std::string> parseTaskList(const std::string& list) {
    std::vector<std::string> out;
    const std::string known = util::joinList(zeroShotTaskNames());
    for (const auto& n : util::splitList(list)) {
        if (n.empty()) continue;
        const auto& names = zeroShotTaskNames();
        if (std::find(names.begin(), names.end(), n) == names.end())
            throw std::invalid_argument("unknown zero-shot task '" + n + "'; known: " + known);
        if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    if (out.empty()) throw std::invalid_argument("no zero-shot task named; give e.g. --tasks arc_easy,piqa (known: " + known + ")");
    return out;
}

ZeroShotTask readZeroShotTask(const std::string& name, const std::string& path, int limit) {
    ZeroShotTask t;
    t.name = name;
    t.source = path;
    if (name == "arc_easy" || name == "arc_challenge") {
        t.accNorm = true;
        readArc(t, limit);
    } else if (name == "piqa") {
        t.accNorm = true;
        readPiqa(t, limit);
    } else if (name == "boolq") {
        readBoolq(t, limit);
    } else if (name == "hellaswag") {
        t.accNorm = true;
        readHellaswag(t, limit);
    } else if (name == "lambada_openai") {
        t.kind = TaskKind::Completion;
        readLambada(t, limit);
    } else if (name == "winogrande") {
        t.kind = TaskKind::PartialContext;
        readWinogrande(t, limit);
    } else {
        parseTaskList(name); // throws naming the known tasks
    }
    if (t.docs.empty()) throw std::runtime_error(path + ": no documents for task " + name);
    return t;
}

ZeroShotTask loadZeroShotTask(const std::string& name, const std::string& dataDir, int limit) {
    for (const auto& f : kFiles)
        if (name == f.name) return readZeroShotTask(name, (fs::path(dataDir) / f.relative).string(), limit);
    parseTaskList(name);
    throw std::logic_error("unreachable");
}

std::vector<ZeroShotTask> loadZeroShotTasks(const std::string& list, const std::string& dataDir, int limit) {
    std::vector<ZeroShotTask> tasks;
    for (const auto& name : parseTaskList(list)) tasks.push_back(loadZeroShotTask(name, dataDir, limit));
    return tasks;
}

} // namespace latmix::eval
