#include "FormWidgets.h"

#include "ElidedLabel.h"

#include "model/QuantizationPoints.h"
#include "model/ModelConfig.h"
#include "mx/MxFormat.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QScrollBar>
#include <QScrollArea>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QFormLayout>
#include <QGroupBox>
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

WindowsBox addWindowsBox(QWidget* parent, QVBoxLayout* column, const QString& prefix, const QString& title, int windows,
                         int seqLen) {
    auto* box = new QGroupBox(title, parent);
    auto* form = new QFormLayout(box);
    const QByteArray w = (prefix + QStringLiteral("WindowsSpin")).toLatin1(), t = (prefix + QStringLiteral("SeqLenSpin")).toLatin1();
    auto* windowsSpin = spin(box, w.constData(), 1, 4096, windows, QObject::tr("Windows of the built-in calibration text"));
    form->addRow(QObject::tr("&Windows:"), windowsSpin);
    auto* seqLenSpin = spin(box, t.constData(), 2, 8192, seqLen, QObject::tr("Tokens per window"));
    form->addRow(QObject::tr("&Tokens each:"), seqLenSpin);
    column->addWidget(box);
    return {form, windowsSpin, seqLenSpin};
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

QScrollArea* scrollingForm(QWidget* form) {
    auto* scroll = new QScrollArea(form->parentWidget());
    scroll->setObjectName(form->objectName().isEmpty() ? QStringLiteral("formScroll") : form->objectName() + QStringLiteral("Scroll"));
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setWidgetResizable(true);
    scroll->setWidget(form);
    scroll->setFixedWidth(form->width() + scroll->verticalScrollBar()->sizeHint().width());
    return scroll;
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

ExpertItem expertItem(const QString& name) {
    static const QRegularExpression number(QStringLiteral("\\.experts\\.(\\d+)\\."));
    const auto m = number.match(name);
    if (!m.hasMatch()) return {name, -1};
    QString item = name;
    item.replace(m.capturedStart(0), m.capturedLength(0), QStringLiteral(".experts.E."));
    return {item, m.captured(1).toInt()};
}

QString withExpert(const QString& item, int expert) {
    QString name = item;
    return name.replace(QStringLiteral(".experts.E."), QStringLiteral(".experts.%1.").arg(expert));
}

PointPicker::PointPicker(QWidget* parent, const char* comboName, const char* expertSpinName)
    : m_combo(new ElidedComboBox(parent)),
      m_expert(spin(parent, expertSpinName, 0, 0, 0, QObject::tr("The expert whose own down_proj input is shown: the "
                                                                 "tokens the router sends it (mixture-of-experts models)"))) {
    m_combo->setObjectName(QLatin1String(comboName));
    m_expert->setEnabled(false);
    QSpinBox* expert = m_expert;
    QObject::connect(m_combo, &QComboBox::currentTextChanged, expert,
                     [expert](const QString& item) { expert->setEnabled(item.contains(QStringLiteral(".experts.E."))); });
}

void PointPicker::setModelDir(const QString& modelDir) {
    const QSignalBlocker a(m_combo), b(m_expert);
    m_combo->clear();
    m_expert->setRange(0, 0);
    m_expert->setEnabled(false);
    if (modelDir.isEmpty()) return;
    const auto config =
        latmix::model::ModelConfig::fromFile(QDir(modelDir).filePath(QStringLiteral("config.json")).toStdString());
    for (const auto& p : latmix::model::pointNamesWithExperts(config)) {
        const auto e = expertItem(QString::fromStdString(p));
        if (e.expert <= 0) m_combo->addItem(e.item); // a sparse layer's experts: once, at expert 0
    }
    if (config.moe) m_expert->setRange(0, config.moe->numExperts - 1);
    m_expert->setEnabled(m_combo->currentText().contains(QStringLiteral(".experts.E.")));
}

bool PointPicker::isEmpty() const { return m_combo->count() == 0; }

QString PointPicker::current() const { return withExpert(m_combo->currentText(), m_expert->value()); }

bool PointPicker::select(const QString& point) {
    const auto e = expertItem(point);
    const int i = m_combo->findText(e.item);
    if (i < 0 || e.expert > m_expert->maximum()) return false;
    if (m_combo->currentIndex() == i) {
        if (e.expert >= 0) m_expert->setValue(e.expert); // a change signal only if the expert changes
        return true;
    }
    if (e.expert >= 0) {
        // One change signal for the pair: the item's.
        const QSignalBlocker quiet(m_expert);
        m_expert->setValue(e.expert);
    }
    m_combo->setCurrentIndex(i);
    return true;
}

std::string exactPointRegex(const QString& point) {
    QString r = point;
    r.replace(QLatin1Char('.'), QStringLiteral("\\."));
    return ("^" + r + "$").toStdString();
}

} // namespace latmix::gui::FormWidgets
