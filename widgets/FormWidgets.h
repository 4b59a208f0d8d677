#pragma once
// The form pieces every view builds the same way: named spin boxes, the MX format combo, the
// foot of a side form (its button, summary and status), and the choice of the open model's
// quantization point (an expert's among them) with an exact capture regex for it.
#include <QString>
#include <QStringList>

#include <string>

class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QPushButton;
class QScrollArea;
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
// A view's side form in a scroll area that scrolls it down, never sideways, as wide as the form
// and a scroll bar: a tall form then does not hold the window above 700 px (gui_x_check).
QScrollArea* scrollingForm(QWidget* form);

struct FormFooter {
    QPushButton* button;
    QLabel* summary;
    QLabel* status;
};
FormFooter addFormFooter(QWidget* form, QVBoxLayout* column, const QString& prefix, const QString& buttonText);

// The box of a view that measures on windows of the built-in calibration text, added to column:
// its Windows and Tokens each spins (prefix + "WindowsSpin", prefix + "SeqLenSpin") in a form
// layout the view may add rows to.
struct WindowsBox {
    QFormLayout* form;
    QSpinBox* windows;
    QSpinBox* seqLen;
};
WindowsBox addWindowsBox(QWidget* parent, QVBoxLayout* column, const QString& prefix, const QString& title, int windows,
                         int seqLen);

// An expert's name ("layers.1.mlp.experts.5.down_proj.input", "mlp.experts.5.up_proj",
// "block_sparse_moe.experts.5.w1") as the one item a list shows for every expert
// ("….experts.E.…") and the expert's number; any other name as it is, expert -1.
struct ExpertItem {
    QString item;
    int expert = -1;
};
ExpertItem expertItem(const QString& name);
// The name of an item for one expert: the number in place of E; other items as they are.
QString withExpert(const QString& item, int expert);

// A view's choice of quantization point: the open model's points (model::pointNamesWithExperts,
// which the in-memory capture reaches with expertPoints) in a combo box, each sparse layer's
// experts as one item ("layers.1.mlp.experts.E.down_proj.input") whose expert the spin box
// chooses (enabled for such an item only). The view lays both out and connects their signals.
class PointPicker {
public:
    PointPicker() = default;
    PointPicker(QWidget* parent, const char* comboName, const char* expertSpinName);
    QComboBox* combo() const { return m_combo; }
    QSpinBox* expert() const { return m_expert; }
    // The points of the model folder, from its config.json (the window has loaded the checkpoint
    // already); empty clears the list. No signal of either box. Throws std::exception naming the
    // file when it cannot be read (the list is then empty).
    void setModelDir(const QString& modelDir);
    bool isEmpty() const;
    QString current() const;           // the chosen point's name, the expert's number in place of E; empty: none
    bool select(const QString& point); // false when the model has no such point

private:
    QComboBox* m_combo = nullptr;
    QSpinBox* m_expert = nullptr;
};
// ECMAScript regex matching exactly that point name ("layers.1.mlp.down_proj.input").
std::string exactPointRegex(const QString& point);

} // namespace latmix::gui::FormWidgets
