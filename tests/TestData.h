#pragma once
// Where the tests find the real models and text (never committed here): LATMIX_DATA_DIR, which
// CTest sets (default ../shared/data beside the checkout, see tests/CMakeLists.txt). Tests that
// need it QSKIP with the path they looked at when it is missing.
#include <QString>
#include <QtGlobal>

namespace latmix::test {

inline QString dataDir() {
    const QString d = QString::fromLocal8Bit(qgetenv("LATMIX_DATA_DIR"));
    return d.isEmpty() ? QStringLiteral("../shared/data") : d;
}

} // namespace latmix::test
