// The repository's docs answer what its code cites: every "SPEC §N" in the sources names a
// section "## N." of docs/spec.md, and the README links the page (issue 35: a clone stands on
// its own, ../shared is not there for its readers).
#include "export/ExportTargets.h"
#include "model/ModelConfig.h"
#include "mx/MxFormat.h"
#include "run/FormatScheme.h"
#include "run/quantize/Method.h"
#include "run/quantize/OptionTable.h"
#include "train/Distillation.h"

#include "CliRunner.h"

#include <CLI/Version.hpp>

#include <QtTest>

#include <QDirIterator>
#include <QMap>
#include <QFile>
#include <QFileInfo>
#include <QDir>
#include <QRegularExpression>
#include <QSet>

namespace {

// For each "## latmix COMMAND" section of docs/cli.md's text, the sorted set of the --options its
// help names: what the page says whatever the CLI11 that laid it out.
QMap<QString, QStringList> optionsByCommand(const QString& page) {
    QMap<QString, QStringList> options;
    static const QRegularExpression section(QStringLiteral("^## (latmix[a-z0-9 -]*)$"), QRegularExpression::MultilineOption);
    static const QRegularExpression option(QStringLiteral("(?<![A-Za-z0-9-])--[a-z0-9][a-z0-9-]*"));
    QList<QRegularExpressionMatch> heads;
    for (auto m = section.globalMatch(page); m.hasNext();) heads << m.next();
    for (int i = 0; i < heads.size(); ++i) {
        const qsizetype from = heads[i].capturedEnd(), to = i + 1 < heads.size() ? heads[i + 1].capturedStart() : page.size();
        QStringList found;
        for (auto m = option.globalMatch(page.mid(from, to - from)); m.hasNext();) found << m.next().captured(0);
        found.removeDuplicates();
        found.sort();
        options.insert(heads[i].captured(1), found);
    }
    return options;
}

} // namespace

class TestDocs : public QObject {
    Q_OBJECT

    static QString sourceDir() { return QStringLiteral(LATMIX_SOURCE_DIR); }

    static QString readAll(const QString& path) {
        QFile f(path);
        if (!f.open(QIODevice::ReadOnly)) return {};
        return QString::fromUtf8(f.readAll());
    }

    // The section numbers "## N." of docs/spec.md.
    static QSet<int> specSections() {
        QSet<int> out;
        static const QRegularExpression heading(QStringLiteral("^## (\\d+)\\. "), QRegularExpression::MultilineOption);
        auto it = heading.globalMatch(readAll(sourceDir() + QStringLiteral("/docs/spec.md")));
        while (it.hasNext()) out.insert(it.next().captured(1).toInt());
        return out;
    }

private slots:
    void specSectionsResolve_data() {
        QTest::addColumn<QString>("folder");
        for (const char* f : {"core", "widgets", "app", "tests"}) QTest::newRow(f) << QString::fromLatin1(f);
    }
    void specSectionsResolve() {
        QFETCH(QString, folder);
        const QSet<int> sections = specSections();
        QVERIFY2(sections.size() >= 8, "docs/spec.md lost its numbered sections");
        static const QRegularExpression cite(QStringLiteral("SPEC §(\\d+)"));
        int citations = 0;
        QStringList missing;
        QDirIterator it(sourceDir() + QLatin1Char('/') + folder, {QStringLiteral("*.cpp"), QStringLiteral("*.h")},
                        QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString path = it.next();
            auto m = cite.globalMatch(readAll(path));
            while (m.hasNext()) {
                const int n = m.next().captured(1).toInt();
                ++citations;
                if (!sections.contains(n)) missing << QStringLiteral("%1: §%2").arg(path.mid(sourceDir().size() + 1)).arg(n);
            }
        }
        QVERIFY2(missing.isEmpty(), qPrintable(QStringLiteral("no such section in docs/spec.md: ") + missing.join(QStringLiteral(", "))));
        if (folder == QLatin1String("core")) QVERIFY(citations > 0); // the scan reads the sources at all
    }

    // docs/developer/architecture.md's table of direct dependencies is core/CMakeLists.txt's DEPS, folder
    // by folder (the build enforces the DEPS; the table is what a newcomer reads).
    void dependencyTableMatchesBuild() {
        QMap<QString, QSet<QString>> build, table;
        static const QRegularExpression call(QStringLiteral("latmix_core_folder\\((\\w+)([^)]*)"));
        auto it = call.globalMatch(readAll(sourceDir() + QStringLiteral("/core/CMakeLists.txt")));
        while (it.hasNext()) {
            const auto m = it.next();
            const QStringList words = m.captured(2).simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts);
            QSet<QString> deps;
            for (int i = words.indexOf(QStringLiteral("DEPS")) + 1; i > 0 && i < words.size() && words[i] != "SOURCES" && words[i] != "LIBS"; ++i)
                deps.insert(words[i]);
            if (m.captured(1) != QLatin1String("name")) build[m.captured(1)] = deps; // skip the function's own definition
        }
        static const QRegularExpression row(QStringLiteral("^\\| ((?:`\\w+`(?:, )?)+) \\| (.*) \\|$"), QRegularExpression::MultilineOption);
        static const QRegularExpression name(QStringLiteral("`(\\w+)`"));
        auto rows = row.globalMatch(readAll(sourceDir() + QStringLiteral("/docs/developer/architecture.md")));
        while (rows.hasNext()) {
            const auto r = rows.next();
            QSet<QString> deps;
            for (auto d = name.globalMatch(r.captured(2)); d.hasNext();) deps.insert(d.next().captured(1));
            for (auto f = name.globalMatch(r.captured(1)); f.hasNext();) table[f.next().captured(1)] = deps;
        }
        QVERIFY2(build.size() >= 10, qPrintable(QStringLiteral("read %1 folders from core/CMakeLists.txt").arg(build.size())));
        for (auto b = build.cbegin(); b != build.cend(); ++b) {
            QVERIFY2(table.contains(b.key()), qPrintable(QStringLiteral("docs/developer/architecture.md has no row for ") + b.key()));
            QVERIFY2(table[b.key()] == b.value(),
                     qPrintable(QStringLiteral("%1: the table says {%2}, the build {%3}")
                                    .arg(b.key(), QStringList(table[b.key()].values()).join(','), QStringList(b.value().values()).join(','))));
        }
        QCOMPARE(table.size(), build.size());
    }

    // Every relative link of the README and of docs/*.md names a file that exists (the pages
    // moved out of the README must not point at paths that were only right from the top).
    void relativeLinksResolve_data() {
        QTest::addColumn<QString>("page");
        QTest::newRow("README.md") << QStringLiteral("README.md");
        QDirIterator it(sourceDir() + QStringLiteral("/docs"), {QStringLiteral("*.md")}, QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString path = it.next();
            const QString rel = path.mid(sourceDir().size() + 1);
            QTest::newRow(qPrintable(rel)) << rel;
        }
    }
    void relativeLinksResolve() {
        QFETCH(QString, page);
        static const QRegularExpression link(QStringLiteral("\\]\\(([^)#\\s]+)(#[^)]*)?\\)"));
        const QString text = readAll(sourceDir() + QLatin1Char('/') + page);
        QVERIFY(!text.isEmpty());
        const QDir base = QFileInfo(sourceDir() + QLatin1Char('/') + page).dir();
        QStringList broken;
        for (auto m = link.globalMatch(text); m.hasNext();) {
            const QString target = m.next().captured(1);
            if (target.contains(QStringLiteral("://")) || target.startsWith(QStringLiteral("mailto:"))) continue;
            if (!QFileInfo::exists(base.filePath(target))) broken << target;
        }
        QVERIFY2(broken.isEmpty(), qPrintable(page + QStringLiteral(" links to missing ") + broken.join(QStringLiteral(", "))));
    }

    // The README stays a front page: at most 150 lines, its two commands first.
    void readmeIsShort() {
        const QString readme = readAll(sourceDir() + QStringLiteral("/README.md"));
        QVERIFY2(readme.count(QLatin1Char('\n')) <= 150, qPrintable(QString::number(readme.count(QLatin1Char('\n')))));
        QVERIFY(readme.indexOf(QStringLiteral("# 2. build and run the test suite")) < 400);
    }

    // docs/cli.md is every command's --help as the built `latmix` prints it (the program path
    // written as "latmix"), so the reference cannot drift from the code. After changing an
    // option: LATMIX_WRITE_CLI_DOC=1 build/bin/tst_docs cliReferenceIsCurrent rewrites the page.
    void cliReferenceIsCurrent() {
        auto help = [](const QStringList& args) {
            const auto r = latmix::test::runLatmix(args + QStringList{QStringLiteral("--help")}, 60000);
            QString text = r.out;
            static const QRegularExpression usage(QStringLiteral("^Usage: \\S*latmix"), QRegularExpression::MultilineOption);
            return r.exitCode == 0 ? text.replace(usage, QStringLiteral("Usage: latmix")).trimmed() : QString();
        };
        const QString top = help({});
        QVERIFY2(!top.isEmpty(), "latmix --help failed");
        QStringList commands;
        static const QRegularExpression sub(QStringLiteral("^  ([a-z0-9-]+)  "), QRegularExpression::MultilineOption);
        for (auto m = sub.globalMatch(top.mid(top.indexOf(QStringLiteral("Subcommands:")))); m.hasNext();)
            commands << m.next().captured(1);
        QVERIFY(commands.contains(QStringLiteral("quantize")) && commands.size() >= 10);
        QString page = QStringLiteral(
            "# Command-line reference\n\n"
            "Every command's `--help`, as `latmix` prints it. tests/docs/tst_docs.cpp checks that this page is\n"
            "current; after changing an option, `LATMIX_WRITE_CLI_DOC=1 build/bin/tst_docs cliReferenceIsCurrent`\n"
            "rewrites it. The README has the three jobs as steps; docs/features.md says what each command does.\n"
            "Help text laid out by CLI11 ") + QStringLiteral(CLI11_VERSION) + QStringLiteral(" (Debian 12's).\n\n"
            "## latmix\n\n```text\n") + top + QStringLiteral("\n```\n");
        for (const QString& c : commands) {
            const QString text = help({c});
            QVERIFY2(!text.isEmpty(), qPrintable("latmix " + c + " --help failed"));
            page += QStringLiteral("\n## latmix %1\n\n```text\n%2\n```\n").arg(c, text);
        }
        const QString path = sourceDir() + QStringLiteral("/docs/cli.md");
        // CLI11 lays the help out differently from one version to the next (Debian 13's 2.4 writes
        // OPTIONS: and other widths): the page is compared character for character where its
        // version builds; elsewhere what does not depend on the layout is: the commands and, for
        // each, the set of its --options.
        const QString stamp = QStringLiteral("Help text laid out by CLI11 ") + QStringLiteral(CLI11_VERSION) + QLatin1Char(' ');
        if (!qEnvironmentVariableIsSet("LATMIX_WRITE_CLI_DOC") && !readAll(path).contains(stamp)) {
            const auto documented = optionsByCommand(readAll(path)), built = optionsByCommand(page);
            QVERIFY(built.size() == commands.size() + 1);
            QCOMPARE(documented.keys(), built.keys());
            for (auto it = built.cbegin(); it != built.cend(); ++it) {
                const QStringList& doc = documented[it.key()];
                QStringList missing, extra;
                for (const QString& o : it.value()) if (!doc.contains(o)) missing << o;
                for (const QString& o : doc) if (!it.value().contains(o)) extra << o;
                QVERIFY2(missing.isEmpty() && extra.isEmpty(),
                         qPrintable("docs/cli.md's options of '" + it.key() + "' differ from this build's (not on the page: " +
                                    missing.join(' ') + "; only on the page: " + extra.join(' ') + "): LATMIX_WRITE_CLI_DOC=1 "
                                    "build/bin/tst_docs cliReferenceIsCurrent rewrites it (on Debian 12's CLI11)"));
            }
            qInfo("docs/cli.md was laid out by another CLI11 than this build's %s: its commands and options were compared, "
                  "its layout is compared on Debian 12", CLI11_VERSION);
            return;
        }
        if (qEnvironmentVariableIsSet("LATMIX_WRITE_CLI_DOC")) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(page.toUtf8());
        }
        QVERIFY2(readAll(path) == page, "docs/cli.md differs from latmix --help: LATMIX_WRITE_CLI_DOC=1 build/bin/tst_docs "
                                        "cliReferenceIsCurrent rewrites it");
    }

    // docs/options.md: the option table (run/quantize/OptionTable.h) as a page, so that the keys
    // of latmix.json, sweep grids and the workbench's names cannot drift from the code.
    // LATMIX_WRITE_OPTIONS_DOC=1 build/bin/tst_docs optionsReferenceIsCurrent rewrites it.
    void optionsReferenceIsCurrent() {
        static const char* const types[] = {"text", "integer", "number", "flag", "on/off", "list"};
        QString page = QStringLiteral(
            "# Quantize options\n\n"
            "Every option of a `latmix quantize` run, from the one table in core/run/quantize/OptionTable.cpp:\n"
            "the **key** is its name in latmix.json's `options`, in a sweep grid's `options` and variants, in\n"
            "the unfinished-run marker (`latmix quantize --resume RUN_DIR` continues with those) and in the\n"
            "run key of a data-parallel run (the options marked *result*: ranks must agree on them); the\n"
            "**flag** is the CLI's (docs/cli.md) and the **workbench** name is its control's, which the\n"
            "workbench's messages use. tests/docs/tst_docs.cpp checks this page; after changing the table,\n"
            "`LATMIX_WRITE_OPTIONS_DOC=1 build/bin/tst_docs optionsReferenceIsCurrent` rewrites it.\n\n"
            "| key | flag | workbench | type | result | what |\n|---|---|---|---|---|---|\n");
        for (const auto& f : latmix::run::optionFields())
            page += QStringLiteral("| `%1` | `%2` | %3 | %4 | %5 | %6 |\n")
                        .arg(f.key, f.flag, f.label, types[int(f.type)], f.changesResult ? "result" : "",
                             QString(f.help).replace('|', "\\|"));
        const QString path = sourceDir() + QStringLiteral("/docs/options.md");
        if (qEnvironmentVariableIsSet("LATMIX_WRITE_OPTIONS_DOC")) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(page.toUtf8());
        }
        QVERIFY2(readAll(path) == page, "docs/options.md differs from the option table: LATMIX_WRITE_OPTIONS_DOC=1 "
                                        "build/bin/tst_docs optionsReferenceIsCurrent rewrites it");
    }

    // The README's "What it supports" from the code's tables (issue 71: it said MoE
    // compressed-tensors was "not there yet" and named no WUSH method, four-over-six, KL or
    // --keep): the architectures, formats, scale modes, methods, losses and export targets are
    // the code's lists. LATMIX_WRITE_README=1 build/bin/tst_docs readmeSupportsIsCurrent rewrites
    // the section.
    void readmeSupportsIsCurrent() {
        auto join = [](const auto& names, const QString& quote) {
            QStringList out;
            for (const auto& n : names) out << quote + QString::fromStdString(n) + quote;
            return out.join(QStringLiteral(", "));
        };
        auto splitList = [](const std::string& list) { // "a, b, c"
            std::vector<std::string> out;
            for (const QString& n : QString::fromStdString(list).split(QStringLiteral(", "))) out.push_back(n.toStdString());
            return out;
        };
        std::vector<std::string> losses;
        for (auto o : {latmix::train::Objective::Kl, latmix::train::Objective::CrossEntropy, latmix::train::Objective::BlockMse})
            losses.push_back(latmix::train::objectiveName(o));
        QStringList targets;
        for (const auto& k : latmix::exporting::exportTargetKinds())
            targets << QStringLiteral("`%1`: %2").arg(QString::fromStdString(k.name), QString::fromStdString(k.choice));
        const QString section =
            QStringLiteral(
                "## What it supports\n\n"
                "<!-- Generated from the code's tables: tests/docs/tst_docs.cpp checks it, and\n"
                "     LATMIX_WRITE_README=1 build/bin/tst_docs readmeSupportsIsCurrent rewrites it. -->\n"
                "- **Models** (config.json's `architectures`): %1. Safetensors in bf16, fp16 or fp32, sharded or\n"
                "  not; llama2.c checkpoints import. Mixtures of experts take every method but WUSH's, GPTQ per\n"
                "  expert with the router kept in full precision ([spec](docs/spec.md), \"Mixture of experts\").\n"
                "- **Formats** (`--format`, weights and activations): %2; scale modes (`--scale-mode`): %3.\n"
                "- **Methods** (`--method`): %4; the paper's ablations (`--t1`, `--t2`, `--t3`, `--init`,\n"
                "  `--granularity`), losses (`--loss`): %5, and block linears kept in bf16 (`--keep REGEX`).\n"
                "- **Mixed precision**: formats per fusion group (`--scheme 'REGEX = FORMAT; ...'`, every method\n"
                "  but WUSH's; scheme formats %7), the KL each group costs (`latmix sensitivity`) and the scheme of least\n"
                "  predicted KL under a bit budget (`latmix plan --budget BITS`) ([spec](docs/spec.md), \"Mixed precision\").\n"
                "- **Exports** (`latmix export --format`, File › Export quantized model…): %6.\n"
                "- **Evaluation**: WikiText-2 perplexity, the KL of the quantized model to the FP one (with\n"
                "  top-1 agreement and the perplexity difference), zero-shot tasks (`--eval-tasks`).\n"
                "- **Devices**: the CPU (any x86-64), CUDA GPUs through a CUDA libtorch, several GPUs or\n"
                "  processes (c10d: NCCL or Gloo).\n\n")
                .arg(join(latmix::model::ModelConfig::supportedArchitectures(), QString()),
                     join(splitList(latmix::mx::formatNameList()), QStringLiteral("`")),
                     join(splitList(latmix::mx::scaleModeNameList()), QStringLiteral("`")),
                     join(splitList(latmix::run::methodNameList()), QStringLiteral("`")),
                     join(losses, QStringLiteral("`")), targets.join(QStringLiteral("; ")),
                     join(splitList(latmix::run::schemeFormatNames()), QStringLiteral("`")));
        const QString path = sourceDir() + QStringLiteral("/README.md");
        QString readme = readAll(path);
        const qsizetype from = readme.indexOf(QStringLiteral("## What it supports\n"));
        const qsizetype to = readme.indexOf(QStringLiteral("\n## "), from + 1) + 1;
        QVERIFY2(from >= 0 && to > from, "README.md has no \"## What it supports\" section followed by another");
        if (qEnvironmentVariableIsSet("LATMIX_WRITE_README")) {
            readme.replace(from, to - from, section);
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(readme.toUtf8());
        }
        QVERIFY2(readme.mid(from, to - from) == section,
                 "README.md's \"What it supports\" differs from the code's tables: LATMIX_WRITE_README=1 "
                 "build/bin/tst_docs readmeSupportsIsCurrent rewrites it");
    }

    void readmeLinksSpec() {
        const QString readme = readAll(sourceDir() + QStringLiteral("/README.md"));
        QVERIFY(readme.contains(QStringLiteral("](docs/spec.md)")));
        QVERIFY2(!readme.contains(QStringLiteral("../shared/SPEC")), "the README points outside the repository");
    }
};

QTEST_GUILESS_MAIN(TestDocs)
#include "tst_docs.moc"
