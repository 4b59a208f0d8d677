#pragma once
// How long core jobs (capture, evaluation, training, GPTQ, export) report progress and learn
// that they should stop, without knowing who listens: the CLI prints, the GUI's job runner
// turns the calls into Qt signals on another thread. No Qt here (QGIS's QgsTask idea).
#include <stdexcept>
#include <string>
#include <utility>

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

// The part [begin, end] of a parent job's progress, its messages prefixed; cancel goes straight
// through. A stage of a longer job reports 0..1 as if it were alone.
class SubJob : public JobContext {
public:
    SubJob(JobContext& parent, double begin, double end, std::string prefix)
        : m_parent(parent), m_begin(begin), m_end(end), m_prefix(std::move(prefix)) {}
    void progress(double fraction, const std::string& message) override {
        m_parent.progress(m_begin + fraction * (m_end - m_begin), m_prefix + message);
    }
    bool cancelRequested() const override { return m_parent.cancelRequested(); }

private:
    JobContext& m_parent;
    double m_begin, m_end;
    std::string m_prefix;
};

} // namespace latmix
