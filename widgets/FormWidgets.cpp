#include "FormWidgets.h"

#include "model/LlamaModel.h"
#include "model/ModelConfig.h"
#include "mx/MxFormat.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <cmath>

namespace latmix::gui::FormWidgets {

QSpinBox* spin(QWidget* parent, const char* objectName, int lo, int hi, int value, const QString& tip) {
    auto* s = new QSpinBox(parent);
    s->setObjectName(QLatin1String(objectName));
    s->setRange(lo, hi);
    s->setValue(value);
    if (!tip.isEmpty()) s->setToolTip(tip);
    return s;
}

QDoubleSpinBox* dspin(QWidget* parent, const char* objectName, double lo, double hi, double value, int decimals,
                      const QString& tip) {
    auto* s = new QDoubleSpinBox(parent);
    s->setObjectName(QLatin1String(objectName));
    s->setRange(lo, hi);
    s->setDecimals(decimals);
    s->setSingleStep(std::pow(10.0, -decimals + 1) / 2);
    s->setValue(value);
    if (!tip.isEmpty()) s->setToolTip(tip);
    return s;
}

QComboBox* formatCombo(QWidget* parent, const char* objectName, const QString& current) {
    auto* c = new QComboBox(parent);
    c->setObjectName(QLatin1String(objectName));
    for (const auto& f : latmix::mx::allFormats()) c->addItem(QString::fromLatin1(f.name));
    c->setCurrentText(current);
    return c;
}

FormFooter addFormFooter(QWidget* form, QVBoxLayout* column, const QString& prefix, const QString& buttonText) {
    FormFooter f;
    f.button = new QPushButton(buttonText, form);
    f.button->setObjectName(prefix + QStringLiteral("AnalyzeButton"));
    column->addWidget(f.button);
    f.summary = new QLabel(form);
    f.summary->setObjectName(prefix + QStringLiteral("Summary"));
    f.summary->setWordWrap(true);
    f.summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    column->addWidget(f.summary);
    f.status = new QLabel(form);
    f.status->setObjectName(prefix + QStringLiteral("Status"));
    f.status->setWordWrap(true);
    column->addWidget(f.status);
    column->addStretch(1);
    return f;
}

QStringList quantizationPoints(const QString& modelDir) {
    const auto config = latmix::model::ModelConfig::fromFile(QDir(modelDir).filePath(QStringLiteral("config.json")).toStdString());
    QStringList points;
    for (const auto& p : latmix::model::quantizationPointNames(config)) points << QString::fromStdString(p);
    return points;
}

std::string exactPointRegex(const QString& point) {
    QString r = point;
    r.replace(QLatin1Char('.'), QStringLiteral("\\."));
    return ("^" + r + "$").toStdString();
}

} // namespace latmix::gui::FormWidgets
