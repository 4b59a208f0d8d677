#pragma once
// Where the tests find the real models and text (never committed here): core's util::dataDir()
// (LATMIX_DATA_DIR, which CTest sets; default ../shared/data beside the checkout). A test that
// needs a missing file skips with the path it looked at, or fails when LATMIX_REQUIRE_DATA=1
// (CI sets it), so that a renamed data file cannot turn ~60 rows into silent skips.
#include "util/DataPath.h"

#include <QString>
#include <QTest>
#include <QtGlobal>

namespace latmix::test {

inline QString dataDir() { return QString::fromStdString(util::dataDir()); }

inline bool dataRequired() { return qEnvironmentVariable("LATMIX_REQUIRE_DATA") == QLatin1String("1"); }

} // namespace latmix::test

// QSKIP for missing data, QFAIL under LATMIX_REQUIRE_DATA=1.
#define LATMIX_DATA_SKIP(message)                                                                            \
    do {                                                                                                     \
        if (latmix::test::dataRequired()) QFAIL(message);                                                    \
        QSKIP(message);                                                                                      \
    } while (false)
