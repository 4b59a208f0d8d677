#include "util/Remedy.h"

#include <algorithm>

namespace latmix::util {
namespace {

std::string flagWords(const Remedy& r) {
    std::string flag = r.key.empty() ? "" : "--" + r.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::string s = r.before;
    for (const std::string* part : {static_cast<const std::string*>(&flag), &r.value, &r.after})
        if (!part->empty()) s += (s.empty() ? "" : " ") + *part;
    return s;
}

} // namespace

std::string remediedMessage(const std::string& cause, const std::vector<Remedy>& remedies, const std::string& after,
                            const std::function<std::string(const Remedy&)>& say, RemedyJoin join) {
    const bool all = join == RemedyJoin::AllOf;
    std::string s = cause;
    for (std::size_t i = 0; i < remedies.size(); ++i)
        s += (i == 0 ? "; use " : i + 1 == remedies.size() ? (all ? " and " : ", or ") : ", ") + say(remedies[i]);
    if (!after.empty()) s += (all && !remedies.empty() ? " " : "; ") + after;
    return s;
}

RemediedError::RemediedError(std::string cause, std::vector<Remedy> remedies, std::string after)
    : std::runtime_error(remediedMessage(cause, remedies, after, flagWords)), m_cause(std::move(cause)),
      m_after(std::move(after)), m_remedies(std::move(remedies)) {}

} // namespace latmix::util
