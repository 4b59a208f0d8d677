#pragma once
// Small helpers shared by the Qt tests.
#include "model/ModelConfig.h"
#include "util/Job.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QString>
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace latmix::test {

// A job that asks to cancel once it has had `count` progress reports (counting only those whose
// message starts with `prefix`, when one is given): cancels at a chosen step, window or stage.
class CancelAfter : public JobContext {
public:
    explicit CancelAfter(int count, std::string prefix = {}) : m_count(count), m_prefix(std::move(prefix)) {}
    void progress(double, const std::string& message) override {
        if (message.rfind(m_prefix, 0) == 0) ++m_reports;
    }
    bool cancelRequested() const override { return m_reports >= m_count; }
    int reports() const { return m_reports; }

private:
    int m_count;
    std::string m_prefix;
    int m_reports = 0;
};

// n token ids drawn uniformly from [0, vocab), seeded (std::mt19937_64: the same on every machine).
inline std::vector<int> randomIds(int n, int vocab, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int>(rng() % static_cast<std::uint64_t>(vocab));
    return ids;
}

// One of the real model configs in resources/configs ("llama-3.1-8b", "qwen3-32b", ...), found
// through LATMIX_CONFIGS_DIR (set by CTest); throws naming the file when it is missing.
inline model::ModelConfig realConfig(const QString& name) {
    QFile f(qEnvironmentVariable("LATMIX_CONFIGS_DIR") + "/" + name + ".json");
    if (!f.open(QIODevice::ReadOnly)) throw std::runtime_error("cannot read " + f.fileName().toStdString());
    return model::ModelConfig::fromJsonText(f.readAll().toStdString(), name.toStdString());
}

// what() of the exception f throws, or "" when it does not throw.
inline QString errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// Same dtype, shape and bits (NaN payloads and signed zeros included).
inline bool bitsEqual(const at::Tensor& a, const at::Tensor& b) {
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
    const auto t = a.element_size() == 2 ? at::kShort : a.element_size() == 4 ? at::kInt : at::kByte;
    return at::equal(a.contiguous().view(t), b.contiguous().view(t));
}

// Leftovers of an interrupted write next to `dir` (util/AtomicFile's hidden temporary siblings).
inline QStringList tempSiblings(const QString& dir) {
    const QFileInfo fi(dir);
    return QDir(fi.absolutePath()).entryList({"." + fi.fileName() + ".tmp-*"}, QDir::AllEntries | QDir::Hidden);
}

inline std::uint32_t bitsOf(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
}

// Bit equality, except that any NaN equals any NaN.
inline bool sameFloat(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || bitsOf(a) == bitsOf(b);
}

// The values as floats; t may live on any device (copied to the CPU first).
inline std::vector<float> toVector(const at::Tensor& t) {
    auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

inline at::Tensor toTensor(const std::vector<float>& v) {
    return at::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, at::kFloat).clone();
}

// Index of the first element where the two differ bitwise, or -1.
inline long long firstMismatch(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (!sameFloat(a[i], b[i])) return static_cast<long long>(i);
    return -1;
}

inline QString describeMismatch(const std::vector<float>& x, const std::vector<float>& got,
                                const std::vector<float>& want, long long i) {
    // QVERIFY2 builds its message whether or not the check fails: i is -1 when nothing differs
    // (reading x[-1] there was the sanitize preset's first finding).
    const auto n = static_cast<long long>(std::min({x.size(), got.size(), want.size()}));
    if (i < 0 || i >= n) return QString("no element %1 (of %2)").arg(i).arg(n);
    return QString("element %1: x=%2 got %3 want %4")
        .arg(i)
        .arg(static_cast<double>(x[i]), 0, 'g', 9)
        .arg(static_cast<double>(got[i]), 0, 'g', 9)
        .arg(static_cast<double>(want[i]), 0, 'g', 9);
}

// The kB of `path` resident in this process: the Rss of its mappings in /proc/self/smaps (pages
// mapped into the process, not the page cache's copy). -1 when smaps cannot be read.
inline long residentKbOf(const QString& path) {
    QFile smaps("/proc/self/smaps");
    if (!smaps.open(QIODevice::ReadOnly | QIODevice::Text)) return -1;
    const QString canonical = QFileInfo(path).canonicalFilePath();
    long kb = 0;
    bool inFile = false;
    for (const QByteArray& line : smaps.readAll().split('\n')) {
        const QString l = QString::fromLocal8Bit(line);
        const QString first = l.section(' ', 0, 0);
        if (first.contains('-') && !first.endsWith(':')) // a mapping's first line: "lo-hi perms offset dev inode path"
            inFile = l.endsWith(canonical);
        else if (inFile && first == "Rss:")
            kb += l.section(' ', 1, -1, QString::SectionSkipEmpty).section(' ', 0, 0).toLong();
    }
    return kb;
}

} // namespace latmix::test
