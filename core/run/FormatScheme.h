#pragma once
// A mixed-precision scheme (docs/spec.md, "Mixed precision"): ordered rules "name regex = format"
// over the model's fusion groups (model/FusionGroups.h); the first rule that takes a group gives
// its format, the run's format the groups no rule takes. Formats by their scheme names: mxfp4,
// nvfp4 (nvfp4:four-over-six for that scale mode), mxint4, mxfp8 (E4M3), mxint8, and bf16 for a
// group kept in full precision. The same text in a file, inline on the command line, in
// latmix.json and in a plan's output.
#include "model/FusionGroups.h"
#include "mx/MxFormat.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace latmix::run {

// A format of a scheme; nullopt is bf16 (kept). Throws std::invalid_argument listing the names.
std::optional<mx::MxConfig> parseSchemeFormat(const std::string& name);
std::string schemeFormatName(const std::optional<mx::MxConfig>& format);
// "mxfp4, nvfp4, nvfp4:four-over-six, mxint4, mxfp8, mxint8, bf16"
std::string schemeFormatNames();

struct SchemeRule {
    std::string pattern; // an ECMAScript regex, searched in names
    std::string format;  // a scheme format name
};

// Rules from text: one "REGEX = FORMAT" per line or separated by ';', '#' starts a comment.
// Throws std::invalid_argument naming the rule that has no '=', an empty regex or format, a regex
// that does not compile or a format no one knows.
std::vector<SchemeRule> parseSchemeRules(const std::string& text);
// The text parseSchemeRules reads back into the same rules, one a line.
std::string schemeRulesText(const std::vector<SchemeRule>& rules);
// A scheme given either way: an existing file's contents, or the text itself when it has a '='.
// Throws naming the file when it is neither.
std::vector<SchemeRule> readSchemeRules(const std::string& fileOrText);

struct GroupFormat {
    model::FusionGroup group;
    std::optional<mx::MxConfig> format; // nullopt: bf16 (kept)
    int rule = -1;                      // the rule that took it; -1: the run's format
};

// Each group's format under the rules. A rule takes a group when it finds the group's name or
// every one of its linears' names; one that finds some of a group's linears but not all is refused
// naming the group and what it matched (its linears read one quantized input), as is a rule that
// takes no group (naming it and a group name to start from). runFormat: the format of the rest.
std::vector<GroupFormat> resolveScheme(const model::ModelConfig& config, const std::vector<SchemeRule>& rules,
                                       const std::optional<mx::MxConfig>& runFormat);

// Average bits per weight of the groups' formats over their weights (quant::bitsPerWeight).
double averageBits(const std::vector<GroupFormat>& groups);

// One rule per group naming it exactly ("^layers\.3\.self_attn\.qkv$ = mxfp8"), in group order: the
// scheme a plan writes.
std::vector<SchemeRule> rulesNamingEachGroup(const std::vector<GroupFormat>& groups);

// What a scheme gives a model before any run (the workbench's Model dock and form): each
// quantization point's format name (schemeFormatName, by model::pointName / expertPointName) and
// the average bits; error says why the rules do not resolve ("" when they do; then no formats).
struct SchemePreview {
    std::map<std::string, std::string> pointFormats;
    double bits = 0;
    std::string error;
};
SchemePreview previewScheme(const model::ModelConfig& config, const std::string& schemeFileOrText,
                            const std::optional<mx::MxConfig>& runFormat);

} // namespace latmix::run
