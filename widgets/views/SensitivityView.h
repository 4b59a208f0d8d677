#pragma once
// The sensitivity tab (docs/user-guide/mixed-precision.md): which fusion groups deserve the bits.
// A heat map of every layer × group kind (qkv, o_proj, gate_up, down_proj, experts), each cell the
// KL to the full-precision model with that group alone quantized in the chosen format
// (run::measureSensitivity on a worker thread, or a table `latmix sensitivity` wrote); the Pareto
// front of bits per weight against predicted KL with the scheme a budget buys marked on it; a
// budget slider that previews its bits and predicted KL; "Use this scheme" hands the scheme's
// rules to the Calibration form.
#include "AnalysisView.h"
#include "quant/BitBudget.h"
#include "run/Sensitivity.h"

#include <QString>

class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSlider;
class QSpinBox;

namespace latmix::gui {

class SensitivityView : public AnalysisView {
    Q_OBJECT

public:
    explicit SensitivityView(QWidget* parent = nullptr);

    void setModelDir(const QString& dir);
    // Measures the open model on the built-in calibration text (worker thread); false and *error
    // when it cannot start. tableReady follows.
    bool measure(QString* error = nullptr);
    // A table `latmix sensitivity` wrote; false and *error (and the status line) when it cannot be read.
    bool loadTable(const QString& path, QString* error = nullptr);
    const latmix::run::SensitivityTable& table() const { return m_table; }

    // The budget in bits per weight (the slider's, in hundredths of a bit) and what it buys.
    void setBudget(double bits);
    double budget() const;
    const latmix::quant::BudgetSolution& plan() const { return m_plan; }
    // The plan's scheme as rules, one per group separated by "; " (the Calibration form's field).
    QString schemeText() const;

signals:
    void tableReady(bool ok, const QString& message);
    void schemeChosen(const QString& rules);

private:
    void showTable();
    void showMap();
    void showFront();
    void showPlan();

    QString m_modelDir;
    latmix::run::SensitivityTable m_table;
    std::vector<latmix::run::GroupFormat> m_groups; // the table's groups, no rule
    latmix::quant::BudgetProblem m_problem;
    latmix::quant::BudgetSolution m_plan;
    QSpinBox* m_windows;
    QSpinBox* m_seqLen;
    QLineEdit* m_formats;
    QPushButton* m_measure;
    QPushButton* m_open;
    QComboBox* m_shown;
    QSlider* m_budget;
    QLabel* m_budgetText;
    QPushButton* m_use;
    QLabel* m_summary;
    QCustomPlot* m_map;
    QCustomPlot* m_front;
};

} // namespace latmix::gui
