// MX format table, names and configuration validation (SPEC §1).
#include "mx/MxCodes.h"
#include "mx/MxFormat.h"

#include <QtTest>

#include <cmath>
#include <stdexcept>

using namespace latmix::mx;

class TestMxFormat : public QObject {
    Q_OBJECT
private slots:
    void parseNames_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("element");
        QTest::addColumn<int>("defaultBlock");
        QTest::addColumn<QString>("precision"); // the paper's "W4A4": the bits in the format's name
        QTest::newRow("mxfp4") << "mxfp4" << int(ElementFormat::E2M1) << 32 << "W4A4";
        QTest::newRow("mxfp6_e2m3") << "mxfp6_e2m3" << int(ElementFormat::E2M3) << 32 << "W6A6";
        QTest::newRow("mxfp6_e3m2") << "mxfp6_e3m2" << int(ElementFormat::E3M2) << 32 << "W6A6";
        QTest::newRow("mxfp8_e4m3") << "mxfp8_e4m3" << int(ElementFormat::E4M3) << 32 << "W8A8";
        QTest::newRow("mxfp8_e5m2") << "mxfp8_e5m2" << int(ElementFormat::E5M2) << 32 << "W8A8";
        QTest::newRow("mxint8") << "mxint8" << int(ElementFormat::Int8) << 32 << "W8A8";
        QTest::newRow("mxint4") << "mxint4" << int(ElementFormat::Int4) << 32 << "W4A4";
        QTest::newRow("nvfp4") << "nvfp4" << int(ElementFormat::E2M1) << 16 << "W4A4";
    }
    void parseNames() {
        QFETCH(QString, name);
        QFETCH(int, element);
        QFETCH(int, defaultBlock);
        QFETCH(QString, precision);
        const Format f = parseFormat(name.toStdString());
        QVERIFY(findFormat(name.toStdString()) == f);
        QVERIFY(!findFormat(name.toUpper().toStdString())); // names are lower case, as the CLI takes them
        QCOMPARE(QString::fromStdString(formatName(f)), name);
        QCOMPARE(QString::fromStdString(precisionLabel(f)), precision);
        QCOMPARE(int(formatInfo(f).element), element);
        const MxConfig c = makeConfig(f);
        QCOMPARE(c.blockSize, defaultBlock);
        c.validate(); // the defaults are valid
    }

    // A column over several runs is named by the label they share, else "quantized".
    void sharedPrecisionLabel_data() {
        QTest::addColumn<QStringList>("formats");
        QTest::addColumn<QString>("label");
        QTest::newRow("one format") << QStringList{"mxfp4", "mxfp4"} << "W4A4";
        QTest::newRow("4-bit formats") << QStringList{"mxfp4", "mxint4", "nvfp4"} << "W4A4";
        QTest::newRow("8-bit formats") << QStringList{"mxfp8_e4m3", "mxint8"} << "W8A8";
        QTest::newRow("4 and 8 bits") << QStringList{"mxfp4", "mxfp8_e4m3"} << "quantized";
        QTest::newRow("unknown name") << QStringList{"mxfp4", "fp4"} << "quantized";
        QTest::newRow("none") << QStringList{} << "quantized";
    }
    void sharedPrecisionLabel() {
        QFETCH(QStringList, formats);
        QFETCH(QString, label);
        std::vector<std::string> names;
        for (const QString& f : formats) names.push_back(f.toStdString());
        QCOMPARE(QString::fromStdString(precisionLabel(names)), label);
    }

    void rejectsBadInput_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("block");
        QTest::addColumn<QString>("scaleMode");
        QTest::addColumn<QString>("messagePart");
        QTest::newRow("unknown format") << "mxfp5" << 32 << "floor" << "mxfp4, mxfp6_e2m3";
        QTest::newRow("block not power of two") << "mxfp4" << 24 << "floor" << "not a power of two";
        QTest::newRow("block zero") << "mxint4" << 0 << "floor" << "not a power of two";
        QTest::newRow("nvfp4 block 32") << "nvfp4" << 32 << "floor" << "blocks of 16";
        QTest::newRow("unknown scale mode") << "mxfp4" << 32 << "round" << "floor, ceil, even, four-over-six";
        QTest::newRow("four-over-six on mxfp4") << "mxfp4" << 32 << "four-over-six" << "use nvfp4";
    }
    void rejectsBadInput() {
        QFETCH(QString, format);
        QFETCH(int, block);
        QFETCH(QString, scaleMode);
        QFETCH(QString, messagePart);
        try {
            MxConfig c{parseFormat(format.toStdString()), block, parseScaleMode(scaleMode.toStdString())};
            c.validate();
            QFAIL("no error raised");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains(messagePart), e.what());
        }
    }

    // The saturation bound of each element format is the value of its largest code (OCP MX
    // v1.0 Table 2), worked out here from the bit layout.
    void maxValueIsLargestCode_data() {
        QTest::addColumn<int>("element");
        QTest::addColumn<int>("largestCode");
        QTest::addColumn<double>("expected");
        QTest::newRow("e2m1 0111") << int(ElementFormat::E2M1) << 0x7 << 6.0;
        QTest::newRow("e2m3 011111") << int(ElementFormat::E2M3) << 0x1F << 7.5;
        QTest::newRow("e3m2 011111") << int(ElementFormat::E3M2) << 0x1F << 28.0;
        QTest::newRow("e4m3 01111110") << int(ElementFormat::E4M3) << 0x7E << 448.0;
        QTest::newRow("e5m2 01111011") << int(ElementFormat::E5M2) << 0x7B << 57344.0;
        QTest::newRow("int8 127") << int(ElementFormat::Int8) << 0x7F << 127.0 / 64.0;
        QTest::newRow("int4 0111") << int(ElementFormat::Int4) << 0x7 << 1.75;
    }
    void maxValueIsLargestCode() {
        QFETCH(int, element);
        QFETCH(int, largestCode);
        QFETCH(double, expected);
        const auto f = static_cast<ElementFormat>(element);
        QCOMPARE(elementSpec(f).maxValue, expected);
        QCOMPARE(decodeElement(static_cast<std::uint8_t>(largestCode), f), expected);
    }

    void describe() {
        QCOMPARE(QString::fromStdString(makeConfig(Format::MxInt4, ScaleMode::Ceil).describe()),
                 QString("mxint4, block 32, scale ceil"));
        QCOMPARE(QString::fromStdString(makeConfig(Format::NvFp4).describe()), QString("nvfp4, block 16"));
        QCOMPARE(QString::fromStdString(makeConfig(Format::NvFp4, ScaleMode::FourOverSix).describe()),
                 QString("nvfp4, block 16, scale four-over-six"));
    }
};

QTEST_APPLESS_MAIN(TestMxFormat)
#include "tst_mxformat.moc"
