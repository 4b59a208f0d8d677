#pragma once
// How long core jobs (capture, evaluation, training, GPTQ, export) report progress and learn
// that they should stop, without knowing who listens: the CLI prints, the GUI's job runner
// turns the calls into Qt signals on another thread. No Qt here (QGIS's QgsTask idea).
#include <stdexcept>
#include <string>

namespace latmix {

class JobContext {
public:
    virtual ~JobContext() = default;
    // fraction in [0, 1]; message says what is being done ("window 3/40").
    virtual void progress(double fraction, const std::string& message) { (void)fraction, (void)message; }
    virtual bool cancelRequested() const { return false; }

    // Throws JobCancelled when a cancel was requested; jobs call it at safe points.
    void checkCancelled() const;
};

class JobCancelled : public std::runtime_error {
public:
    JobCancelled() : std::runtime_error("cancelled") {}
};

inline void JobContext::checkCancelled() const {
    if (cancelRequested()) throw JobCancelled();
}

// A context that reports nothing and never cancels.
inline JobContext& silentJob() {
    static JobContext ctx;
    return ctx;
}

} // namespace latmix
