#pragma once
// Where the real data lives (models, WikiText-2, zero-shot tasks; never committed): the folder
// LATMIX_DATA_DIR names, default ../shared/data. The one lookup the CLI, the GUI and the tests use.
#include <string>

namespace latmix::util {

// LATMIX_DATA_DIR, or "../shared/data" when it is unset or empty.
std::string dataDir();

// dataDir()/relative, whether or not it exists.
std::string dataFile(const std::string& relative);

// dataDir()/relative; throws std::runtime_error naming `what` and the path when it is missing.
std::string requireDataFile(const std::string& relative, const std::string& what);

// The calibration text: `given` when it is set, else dataDir()/wikitext-2/wiki.valid.tokens (SPEC
// §5: a training-side split, never the test text perplexity is measured on). Throws like
// requireDataFile when the default is missing.
std::string calibrationTextFile(const std::string& given = {});

// dataDir()/wikitext-2/wiki.test.raw, the WikiText-2 test split perplexity is measured on (SPEC §7).
std::string wikiText2TestFile();

} // namespace latmix::util
