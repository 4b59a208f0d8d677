#pragma once
// A way out of a refusal or a failure as data: an option setting (its key in the option table,
// run/quantize/OptionTable.h) or a sentence alone, so that each face says it in its own words —
// the CLI names the flag, the workbench its control (run::messageFor). Errors raised below run/
// (training, evaluation, GPTQ) cannot see the table: they carry the keys, and what() falls back to
// "--" + the key with '-' for '_' (the rule of the flags those errors name).
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace latmix::util {

struct Remedy {
    std::string key;    // an option of the table, or empty
    std::string value;  // its setting ("off"); empty for a flag and for "fewer / shorter"
    std::string before; // said before it ("fewer")
    std::string after;  // said after it ("(now 64)", "to run anyway")
};

// Whether any one of the remedies is a way out, or only all of them together (the settings a
// resumed run must keep).
enum class RemedyJoin { AnyOf, AllOf };

// "<cause>; use <remedy>, <remedy>, or <remedy>[; <after>]" (AllOf: "..., <remedy> and <remedy>[ <after>]"),
// each remedy as `say` words it.
std::string remediedMessage(const std::string& cause, const std::vector<Remedy>& remedies, const std::string& after,
                            const std::function<std::string(const Remedy&)>& say, RemedyJoin join = RemedyJoin::AnyOf);

// A failure whose ways out are remedies; what() says them with the flags' rule above.
class RemediedError : public std::runtime_error {
public:
    RemediedError(std::string cause, std::vector<Remedy> remedies, std::string after = {});
    const std::string& cause() const { return m_cause; }
    const std::vector<Remedy>& remedies() const { return m_remedies; }
    const std::string& after() const { return m_after; }

private:
    std::string m_cause, m_after;
    std::vector<Remedy> m_remedies;
};

} // namespace latmix::util
