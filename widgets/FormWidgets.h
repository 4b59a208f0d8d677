#pragma once
// The form pieces every view builds the same way: named spin boxes, the MX format combo, the
// foot of a side form (its button, summary and status), and the open model's quantization points
// (names, an exact capture regex for one of them).
#include <QString>
#include <QStringList>

#include <string>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QVBoxLayout;
class QWidget;

namespace latmix::gui::FormWidgets {

QSpinBox* spin(QWidget* parent, const char* objectName, int lo, int hi, int value, const QString& tip = QString());
QDoubleSpinBox* dspin(QWidget* parent, const char* objectName, double lo, double hi, double value, int decimals,
                      const QString& tip = QString());
// Every MX format by name (mx::allFormats), current one selected.
QComboBox* formatCombo(QWidget* parent, const char* objectName, const QString& current = QStringLiteral("mxfp4"));

// The foot of a view's side form, added to column: the button that starts the view's job
// (prefix + "AnalyzeButton"), a selectable word-wrapped summary of the last result
// (prefix + "Summary"), a word-wrapped status line for progress and errors (prefix + "Status"),
// then a stretch that keeps them at the top.
struct FormFooter {
    QPushButton* button;
    QLabel* summary;
    QLabel* status;
};
FormFooter addFormFooter(QWidget* form, QVBoxLayout* column, const QString& prefix, const QString& buttonText);

// The activation quantization points of the model folder (from its config.json: the window has
// loaded the checkpoint already). Throws std::exception naming the file when it cannot be read.
QStringList quantizationPoints(const QString& modelDir);
// ECMAScript regex matching exactly that point name ("layers.1.mlp.down_proj.input").
std::string exactPointRegex(const QString& point);

} // namespace latmix::gui::FormWidgets
